package consensus

import (
	_ "unsafe" // for go:linkname

	bolt "go.etcd.io/bbolt"
	_ "go.etcd.io/etcd/server/v3/storage/backend" // holds boltOpenOptions
)

// boltOpenOptions are the options etcd opens its bbolt database with. etcd
// exposes no setting for them; the linkname reaches its package variable,
// and a build against an etcd without it fails to link rather than run
// with the default.
//
//go:linkname boltOpenOptions go.etcd.io/etcd/server/v3/storage/backend.boltOpenOptions
var boltOpenOptions *bolt.Options

// etcd maps its database with MAP_POPULATE, which reads the whole file
// into page cache at every start, so that a database of gigabytes is
// indexed from memory. A member's database here is the cluster's own
// small state, kilobytes, but bbolt keeps 16 MiB of file past its last
// page (a hole it grows into), and populating that zeroes 16 MiB of page
// cache on every start (docs/decisions.md, "etcd's start"), an eighth of
// a 128 MiB node. Without it, bbolt faults in the pages it reads, the few
// that hold data.
func init() { boltOpenOptions.MmapFlags = 0 }
