package cluster

import (
	"context"
	"time"

	"github.com/borough-os/borough/internal/consensus"
	"github.com/borough-os/borough/internal/nodestate"
)

// A member learns that the cluster removed it from etcd, or, when it is
// cut off or refused before the removal reaches it, from its peers: it
// watches its leader and asks them (package join's status).

// leaderCheckEvery is how often watchRemoval looks at the member's
// leader; leaderConfirmWait how long it waits for a learner's leader to
// confirm it.
const (
	leaderCheckEvery  = 5 * time.Second
	leaderConfirmWait = 2 * time.Second
)

// watchRemoval asks the peers whether the cluster removed this node once
// its member has been without a leader that leads it (consensus.Led) for
// statusAfter, and returns consensus.ErrRemoved when one says so. A
// removal revokes the node's certificate first: the peers can put the
// revocation in force and refuse the member before the removal reaches
// it, and a member cut off so never learns it from etcd.
func (m *Member) watchRemoval(ctx context.Context, c *consensus.Consensus, self string) error {
	var since time.Time
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(leaderCheckEvery):
		}
		now := time.Now()
		led := c.Led(ctx, leaderConfirmWait)
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case led:
			since = time.Time{}
			continue
		case since.IsZero():
			since = now
			continue
		case time.Since(since) < statusAfter:
			continue
		}
		since = time.Now()
		removed, err := m.askStatus(ctx, self)
		switch {
		case err != nil:
			m.log.Warn("this member has no leader that confirms it, and no peer says whether the cluster removed it", "err", err)
		case removed:
			m.log.Warn("this member has no leader that confirms it, and a peer says the cluster removed it")
			return consensus.ErrRemoved
		}
	}
}

// removed records that the cluster removed the node and fails it for
// good.
func (m *Member) removed(rec *nodestate.Record) error {
	m.life.Fail(m.recordRemoval(rec))
	return nil
}
