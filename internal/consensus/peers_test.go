package consensus

import (
	"context"
	"testing"
	"time"
)

// TestConnectedPeers reads etcd's own gauge of live raft connections: a
// voter and its learner each name the other, and once the voter stops,
// the learner no longer names it.
func TestConnectedPeers(t *testing.T) {
	tc := newTestCA(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	voter, learner, learnerID, stopVoter := tc.voterAndLearner(ctx, "127.0.0.18", "127.0.0.19")
	voterID := voter.MemberID()
	awaitTrue(t, time.Minute, "the voter connected to its learner", func() bool { return voter.connectedPeers()[learnerID] })
	awaitTrue(t, time.Minute, "the learner connected to its voter", func() bool { return learner.connectedPeers()[voterID] })
	if voter.connectedPeers()[voterID] {
		t.Errorf("the voter names itself among its connected peers")
	}
	stopVoter()
	awaitTrue(t, time.Minute, "the learner to see its voter gone", func() bool { return !learner.connectedPeers()[voterID] })
}
