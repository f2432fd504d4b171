package consensus

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// churnEvery is how often TestAuthChurn changes the users: a hundred
// times a second, far more often than an owner does.
const churnEvery = 10 * time.Millisecond

// TestAuthChurn runs a real one-member etcd with authentication on and
// changes its users over and over, as an owner minting credentials does,
// while the node's own client reads and writes and its CRL watcher runs:
// no request of the node's fails, and the member keeps running.
func TestAuthChurn(t *testing.T) {
	tc := newTestCA(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, done, _ := run(t, ctx, tc.member("n1", "127.0.0.12", ModeNew))
	awaitAuth(t, ctx, c)
	churnCtx, endChurn := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var churned int
	wg.Go(func() {
		for ; churnCtx.Err() == nil; churned++ {
			user := fmt.Sprintf("app-%d", churned)
			if _, err := c.Client.UserAddWithOptions(ctx, user, "", &clientv3.UserAddOptions{NoPassword: true}); err != nil {
				t.Errorf("adding user %s: %v", user, err)
				return
			}
			time.Sleep(churnEvery)
		}
	})
	for i := range 300 {
		key := fmt.Sprintf("churn/%d", i)
		if _, err := c.Client.Put(ctx, key, "v"); err != nil {
			t.Fatalf("put %d while users changed: %v", i, err)
		}
		if _, err := c.Client.Get(ctx, key); err != nil {
			t.Fatalf("get %d while users changed: %v", i, err)
		}
	}
	endChurn()
	wg.Wait()
	t.Logf("%d users added during 300 puts and gets", churned)
	select {
	case err := <-done:
		t.Fatalf("the member stopped while users changed: %v", err)
	default:
	}
}
