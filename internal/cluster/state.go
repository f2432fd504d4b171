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

// stateMachine holds the node's state and logs every transition.
type stateMachine struct {
	log *slog.Logger

	mu      sync.Mutex
	state   State
	failure string
}

// current returns the state and, in Failed, the reason.
func (m *stateMachine) current() (State, string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.state, m.failure
}

// to moves to next, logging "state A -> B". A transition the diagram does
// not allow is a programming error.
func (m *stateMachine) to(next State) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, s := range transitions[m.state] {
		if s == next {
			m.log.Info(fmt.Sprintf("state %s -> %s", m.state, next))
			m.state = next
			return
		}
	}
	panic(fmt.Sprintf("cluster: no transition from %s to %s", m.state, next))
}

// fail moves to Failed and logs the reason, as "node failed: <reason>"
// (at info level, so that the line reads exactly so; the transition
// before it says the node failed).
func (m *stateMachine) fail(reason error) {
	if state, _ := m.current(); state != StateFailed {
		m.to(StateFailed)
	}
	m.mu.Lock()
	m.failure = reason.Error()
	m.mu.Unlock()
	m.log.Info("node failed: " + reason.Error())
}
