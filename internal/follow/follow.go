// Package follow watches a key prefix for as long as its caller wants,
// through the restarts, elections and partitions of a cluster under
// faults, without skipping a revision or seeing one twice.
//
// clientv3 resumes a watch by itself when its connection breaks, but not
// one its member ends: with WithRequireLeader, which keeps a member cut
// off from its leader from holding a watch back, a member without a
// leader cancels the watch and its channel closes. Watch.From then
// watches again from the revision after the last event it delivered,
// through whichever member the client picks. The soak's load and the
// fault suite's record of commits both follow their keys this way.
package follow

import (
	"context"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Watch is a prefix to follow and what to do with what it sees.
type Watch struct {
	Client *clientv3.Client
	Prefix string
	// Each receives every response of the watch, in revision order.
	Each func(clientv3.WatchResponse)
	// Resumed, if set, is called each time the watch starts again.
	Resumed func()
}

// retry is how long From waits before it watches again.
const retry = 100 * time.Millisecond

// From follows w.Prefix from revision rev until ctx ends, and then
// returns nil. When the revision it is to watch from was compacted
// first, it returns an error wrapping rpctypes.ErrCompacted, and
// compacted, the compaction's revision, from which a caller that can bear
// the gap may follow on.
func (w Watch) From(ctx context.Context, rev int64) (compacted int64, err error) {
	for ctx.Err() == nil {
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		for resp := range w.Client.Watch(wctx, w.Prefix, clientv3.WithPrefix(), clientv3.WithRev(rev)) {
			if resp.CompactRevision != 0 {
				cancel()
				return resp.CompactRevision, fmt.Errorf("following %s from revision %d: %w", w.Prefix, rev, rpctypes.ErrCompacted)
			}
			if resp.Err() != nil {
				break
			}
			for _, ev := range resp.Events {
				rev = ev.Kv.ModRevision + 1
			}
			w.Each(resp)
		}
		cancel()
		select {
		case <-ctx.Done():
		case <-time.After(retry):
			if w.Resumed != nil {
				w.Resumed()
			}
		}
	}
	return 0, nil
}
