package consensus

import (
	"context"
	"time"
)

// A member that catches up from a snapshot in a quiet cluster.
//
// etcd refuses every proposal of a member whose committed index is more
// than applyGap ahead of what it has applied, and (v3.7) moves the
// applied index it checks only when it applies an entry, not a snapshot.
// A member that caught up from a snapshot is therefore refused
// everything, its publish included, until the cluster writes its next
// entry, which a quiet cluster (one just recovered) never does
// (docs/decisions.md, "A member stuck behind its snapshot"; the fix to
// send etcd, which retires this, is in docs/upstream/).
//
// unstall watches for that state (committed more than applyGap ahead of
// applied, which has not moved for a whole stallCheck) and proposes a
// membership change that changes nothing, the member's own advertised
// peer URL again: etcd proposes membership changes without the gap
// check, and applying it moves the applied index. A member applying a
// long log, or a leader, is left alone. While that change is committed
// and not applied, raft turns other membership changes into empty
// entries, so their callers bound their wait (the autopromoter's
// promoteWait).

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
