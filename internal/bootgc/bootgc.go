// Package bootgc keeps the node's garbage collector out of its boot.
//
// Go collects as soon as a heap of 4 MiB has doubled, and the node's boot
// allocates steadily (package inits, etcd's start, TLS, protobuf), so it
// collected several times before "node running" for a live heap that
// stays small (docs/decisions.md, "The garbage collector at boot").
// Nothing is gained by collecting that early: what a collection frees
// would only be reused by the rest of the boot.
// So process 1 starts the node with the collector off and a memory limit
// (Env): the runtime collects only if the node's memory reaches the
// limit, which a boot does not, and a node that never reaches "node
// running" (a failed node stays up to say why) is still bounded by it.
// Once the node runs, Lift restores Go's default, for a node that may run
// for months.
//
// The runtime reads GOGC and GOMEMLIMIT from the environment before any
// package init runs, which is why this is the environment process 1
// gives the node rather than a call in the node's main: the package inits
// (etcd's, gRPC's, protobuf's registrations) allocate too.
package bootgc

import (
	"math"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
)

// Limit is the node's memory limit until Lift, in bytes: above what a
// boot allocates and within what a 128 MiB machine has left for the node
// beside the kernel and the node binary's page cache (docs/decisions.md,
// "The garbage collector at boot").
const Limit = 48 << 20

// Env returns environ, process 1's environment, for the node: with the
// collector off up to Limit, in place of any GOGC or GOMEMLIMIT in
// environ, so that after Lift the node runs Go's default whatever process
// 1 was given.
func Env(environ []string) []string {
	env := slices.DeleteFunc(slices.Clone(environ), func(kv string) bool {
		return strings.HasPrefix(kv, "GOGC=") || strings.HasPrefix(kv, "GOMEMLIMIT=")
	})
	return append(env, "GOGC=off", "GOMEMLIMIT="+strconv.Itoa(Limit))
}

// Lift gives the collector Go's default: collect when the heap has
// doubled, no memory limit.
func Lift() {
	debug.SetGCPercent(100)
	debug.SetMemoryLimit(math.MaxInt64)
}
