package consensus

import (
	"context"
	"time"
)

// A member that catches up from a snapshot in a quiet cluster.
//
// etcd refuses every proposal of a member whose committed index is more
// than applyGap ahead of what it has applied (ErrTooManyRequests), so
// that proposals do not outrun the apply. But etcd (v3.7) moves the
// applied index it checks only when it applies an entry, not when it
// applies a snapshot. A member that joins a cluster whose leader has
// compacted its log gets the leader's snapshot: its committed index jumps
// to the snapshot's, its applied index stays at 0, and, from a log longer
// than applyGap, etcd refuses the proposal by which the member publishes
// its name, which it must make before it serves, as it refuses all
// others. Only the next entry of the cluster's unsticks it, and a cluster
// the owner has just recovered, alone and quiet, makes none: the member
// retried its publish for two minutes, without a pause, and gave up
// ("etcd did not become ready"). A running member that falls behind and
// catches up from a snapshot is stuck the same way, its own writes
// refused.
//
// unstall therefore watches for that state: committed index more than
// applyGap ahead of the applied one, which has not moved for a whole
// stallCheck. It then proposes a membership change that changes nothing,
// the member's own peer URL again: etcd proposes membership changes
// without the gap check, the leader commits it, and applying it moves the
// applied index. A member applying a long log moves its applied index
// every check, and is left alone; so is a leader, which never catches up
// from a snapshot. The URL proposed is the one the member advertises, not
// its entry in the member list, which a move of the node's address
// (cluster's announceMove) may be changing at the same time.
//
// While the change is committed and not yet applied, raft turns any other
// membership change proposed into an empty entry, which etcd's caller
// waits for until its context ends: callers of membership changes bound
// their wait (the autopromoter's promoteWait).

// applyGap is etcd's limit between committed and applied index
// (etcdserver's maxGapBetweenApplyAndCommitIndex, unexported).
const applyGap = 5000

// stallCheck is how often unstall looks.
const stallCheck = time.Second

// startUnstall runs unstall until the function it returns is called,
// which waits for unstall to return; calling it again does nothing more.
func (c *Consensus) startUnstall() (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.unstall(ctx)
	}()
	return func() {
		cancel()
		<-done
	}
}

// unstall proposes a membership change that changes nothing whenever etcd
// refuses the member's proposals because of a snapshot it counts as
// nothing applied (see above), until ctx ends.
func (c *Consensus) unstall(ctx context.Context) {
	s := c.etcd.Server
	last := s.AppliedIndex()
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(stallCheck):
		}
		applied, committed := s.AppliedIndex(), s.CommittedIndex()
		if committed > applied+applyGap && applied == last {
			c.nudge(ctx, applied, committed)
		}
		last = applied
	}
}

// nudgeWait bounds the wait for the proposal's apply: unstall proposes
// again at its next check.
const nudgeWait = 5 * stallCheck

// nudge proposes the member's own peer URL again, and logs what came of
// it.
func (c *Consensus) nudge(ctx context.Context, applied, committed uint64) {
	s := c.etcd.Server
	if s.Leader() == s.MemberID() {
		return
	}
	proposed, cancel := context.WithTimeout(ctx, nudgeWait)
	defer cancel()
	_, err := c.Client.MemberUpdate(proposed, c.MemberID(), []string{c.PeerURL()})
	log := c.cfg.Log.With("applied", applied, "committed", committed)
	switch {
	case ctx.Err() != nil:
		// The member is closing: nothing to say.
	case err != nil:
		log.Warn("etcd refuses this member's proposals after a snapshot; proposing its own peer URL again failed, to be tried again",
			"err", err)
	default:
		log.Info("etcd refused this member's proposals after a snapshot; its own peer URL, proposed again, moved its applied index",
			"now", s.AppliedIndex())
	}
}
