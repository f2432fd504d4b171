package consensus

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/types"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/borough-os/borough/internal/poll"
)

// TestUnstall gets a learner stuck as etcd leaves a member that catches up
// from a snapshot in a quiet cluster: the leader drops its messages to
// the learner while it takes more writes than etcd's apply gap, and
// compacts its log; once the messages flow again, the learner gets the
// leader's snapshot, which etcd counts as nothing applied, and nothing
// else comes. The learner must still take writes, and know the writes
// before the snapshot. (A member that joins a quiet cluster gets stuck
// the same way if its publish misses the snapshot, a race this test
// cannot order.)
func TestUnstall(t *testing.T) {
	tc := newTestCA(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	leader, learner, id, _ := tc.voterAndLearner(ctx, "127.0.0.71", "127.0.0.72")
	if _, err := learner.Client.Put(ctx, "before", "v"); err != nil {
		t.Fatalf("a write through the learner before the cut: %v", err)
	}

	leader.etcd.Server.CutPeer(types.ID(id))
	const writes, writers = applyGap + 500, 32
	errs := make(chan error, writers)
	for w := range writers {
		go func() {
			for i := w; i < writes; i += writers {
				if _, err := leader.Client.Put(ctx, fmt.Sprintf("load/%05d", i), "v"); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range writers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	leader.etcd.Server.MendPeer(types.ID(id))

	// etcd refuses the learner's writes until it has applied an entry
	// after the snapshot.
	if err := poll.Until(ctx, 30*time.Second, 100*time.Millisecond, func() error {
		wctx, wcancel := context.WithTimeout(ctx, 2*time.Second)
		defer wcancel()
		_, err := learner.Client.Put(wctx, "after", "v")
		return err
	}); err != nil {
		t.Fatalf("a write through the learner after the snapshot: %v", err)
	}
	if !strings.Contains(tc.logs.String(), "moved its applied index") {
		t.Error("the learner did not say it moved its applied index: it did not catch up from a snapshot, and the test no longer tests it")
	}
	got, err := learner.Client.Get(ctx, "load/", clientv3.WithPrefix(), clientv3.WithSerializable(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatalf("counting the learner's keys: %v", err)
	}
	if got.Count != writes {
		t.Errorf("the learner has %d keys, want %d", got.Count, writes)
	}
}
