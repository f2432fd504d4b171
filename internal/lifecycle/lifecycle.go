// Package lifecycle says where a node is on its way into its cluster: one
// state, the transitions allowed between states, why the node failed, and
// its names once known. Bring-up fails it before the cluster manager
// exists (a bad enrolment config, no network), the manager moves it from
// the data volume's mount on, and the node API reads it throughout.
//
// It is a leaf of its own, apart from the manager that moves it, because
// the owner's tool reads the same state names off the node API and must
// not link the node's machinery (etcd's server, the TPM, storage) to
// name them.
package lifecycle

import (
	"fmt"
	"log/slog"
	"sync"
)

// State is where the node is on its way into a cluster.
type State string

// States of the node.
const (
	New             State = "New"
	CreatingCluster State = "CreatingCluster"
	Joining         State = "Joining"
	Restarting      State = "Restarting"
	Running         State = "Running"
	Failed          State = "Failed"
)

// transitions lists the states each state may move to.
var transitions = map[State][]State{
	New:             {CreatingCluster, Joining, Restarting, Failed},
	CreatingCluster: {Running, Failed},
	Joining:         {Running, Failed},
	Restarting:      {Running, Failed},
	Running:         {Failed},
}

// Lifecycle is the node's way into its cluster. Every transition is
// logged.
type Lifecycle struct {
	log *slog.Logger

	mu      sync.Mutex
	state   State
	failure string
	// cluster and member are the node's names, once the manager knows
	// them.
	cluster, member string
}

// Start returns the lifecycle of a node in state New. log is the node's
// root logger: transitions are node-level events.
func Start(log *slog.Logger) *Lifecycle {
	return &Lifecycle{log: log, state: New}
}

// Status is what the node API says of the node's way into its cluster.
type Status struct {
	State State
	// Failure is why the node is Failed.
	Failure string
	// Cluster and Member are the node's cluster and name, once known.
	Cluster, Member string
}

// Status returns the node's state and, once known, its names.
func (l *Lifecycle) Status() Status {
	l.mu.Lock()
	defer l.mu.Unlock()
	return Status{State: l.state, Failure: l.failure, Cluster: l.cluster, Member: l.member}
}

// Named records the node's names once its record holds them.
func (l *Lifecycle) Named(cluster, member string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cluster, l.member = cluster, member
}

// To moves to next, logging "state A -> B". A transition the diagram does
// not allow is a programming error.
func (l *Lifecycle) To(next State) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.toLocked(next)
}

func (l *Lifecycle) toLocked(next State) {
	for _, s := range transitions[l.state] {
		if s == next {
			l.log.Info(fmt.Sprintf("state %s -> %s", l.state, next))
			l.state = next
			return
		}
	}
	panic(fmt.Sprintf("lifecycle: no transition from %s to %s", l.state, next))
}

// Fail moves the node to Failed and logs the reason, as "node failed:
// <reason>" (at info level, so that the line reads exactly so; the
// transition before it says the node failed).
func (l *Lifecycle) Fail(reason error) {
	l.mu.Lock()
	if l.state != Failed {
		l.toLocked(Failed)
	}
	l.failure = reason.Error()
	l.mu.Unlock()
	l.log.Info("node failed: " + reason.Error())
}
