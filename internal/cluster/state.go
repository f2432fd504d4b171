package cluster

import (
	"fmt"
	"log/slog"
	"sync"
)

// State is where the node is on its way into a cluster.
type State string

// States of the node.
const (
	StateNew             State = "New"
	StateCreatingCluster State = "CreatingCluster"
	StateJoining         State = "Joining"
	StateRestarting      State = "Restarting"
	StateRunning         State = "Running"
	StateFailed          State = "Failed"
)

// transitions lists the states each state may move to.
var transitions = map[State][]State{
	StateNew:             {StateCreatingCluster, StateJoining, StateRestarting, StateFailed},
	StateCreatingCluster: {StateRunning, StateFailed},
	StateJoining:         {StateRunning, StateFailed},
	StateRestarting:      {StateRunning, StateFailed},
	StateRunning:         {StateFailed},
}

// Lifecycle is the node's way into its cluster: its state, why it
// failed, and its names once known. Bring-up fails it before the cluster
// manager exists (a bad enrolment config, no network), the manager moves
// it from the data volume's mount on, and the node API reads it
// throughout. Every transition is logged.
type Lifecycle struct {
	log *slog.Logger

	mu      sync.Mutex
	state   State
	failure string
	// cluster and member are the node's names, once the manager knows
	// them.
	cluster, member string
}

// NewLifecycle returns the lifecycle of a node in state New. log is the
// node's root logger: transitions are node-level events.
func NewLifecycle(log *slog.Logger) *Lifecycle {
	return &Lifecycle{log: log, state: StateNew}
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

// current returns the state and, in Failed, the reason.
func (l *Lifecycle) current() (State, string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.state, l.failure
}

// named records the node's names once its record holds them.
func (l *Lifecycle) named(cluster, member string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cluster, l.member = cluster, member
}

// to moves to next, logging "state A -> B". A transition the diagram does
// not allow is a programming error.
func (l *Lifecycle) to(next State) {
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
	panic(fmt.Sprintf("cluster: no transition from %s to %s", l.state, next))
}

// Fail moves the node to Failed and logs the reason, as "node failed:
// <reason>" (at info level, so that the line reads exactly so; the
// transition before it says the node failed).
func (l *Lifecycle) Fail(reason error) {
	l.mu.Lock()
	if l.state != StateFailed {
		l.toLocked(StateFailed)
	}
	l.failure = reason.Error()
	l.mu.Unlock()
	l.log.Info("node failed: " + reason.Error())
}
