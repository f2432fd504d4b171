package consensus

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestGate: closing the gate ends the requests in it and waits for them to
// leave; a request after that is refused.
func TestGate(t *testing.T) {
	g := newGate()
	ctx, leave, err := g.enter(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	left := make(chan struct{})
	go func() {
		<-ctx.Done() // a request waiting for a leader that never comes
		time.Sleep(50 * time.Millisecond)
		leave()
		close(left)
	}()
	if !g.close() {
		t.Fatal("close did not wait for the request to leave")
	}
	select {
	case <-left:
	default:
		t.Fatal("close returned before the request left")
	}
	if _, _, err := g.enter(context.Background()); !errors.Is(err, errClosed) {
		t.Fatalf("a request after close: %v, want %v", err, errClosed)
	}
}

// TestCloseUnderRequests closes a member while the node's own client reads
// (serializable and linearizable), writes and watches in a loop: each
// ends with an error, and the member's database is not read after it
// closed (bbolt panicked on it before the gate).
func TestCloseUnderRequests(t *testing.T) {
	tc := newTestCA(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := Start(ctx, tc.member("n1", "127.0.0.12", ModeNew))
	if err != nil {
		t.Fatal(err)
	}
	loads := map[string]func(context.Context) error{
		"serializable read": func(ctx context.Context) error {
			_, err := c.Client.Get(ctx, "k", clientv3.WithSerializable())
			return err
		},
		"linearizable read": func(ctx context.Context) error { _, err := c.Client.Get(ctx, "k"); return err },
		"write":             func(ctx context.Context) error { _, err := c.Client.Put(ctx, "k", "v"); return err },
		"watch": func(ctx context.Context) error {
			for wr := range c.Client.Watch(ctx, "k") {
				if err := wr.Err(); err != nil {
					return err
				}
			}
			return errors.New("the watch ended")
		},
	}
	var wg sync.WaitGroup
	var closed atomic.Bool
	started := make(chan struct{}, len(loads))
	for name, load := range loads {
		wg.Go(func() {
			started <- struct{}{}
			for {
				err := load(ctx)
				if err != nil && (closed.Load() || ctx.Err() != nil) {
					return
				}
				if err != nil {
					t.Errorf("%s before the member closed: %v", name, err)
					return
				}
			}
		})
	}
	for range loads {
		<-started
	}
	time.Sleep(200 * time.Millisecond)
	closed.Store(true)
	if !c.gate.close() {
		t.Error("the gate did not see every request leave within its bound")
	}
	c.Close()
	wg.Wait()
	if ctx.Err() != nil {
		t.Fatal("the loads did not end when the member closed")
	}
}
