package robustness

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/borough-os/borough/internal/etcdtest"
)

// TestWorkload runs three clients against a real etcd for two seconds:
// every kind of call answers, and the history is linearizable; the same
// history with a read that misses an acknowledged write is not.
func TestWorkload(t *testing.T) {
	endpoint := etcdtest.Start(t)
	var clients []*clientv3.Client
	for range 3 {
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		clients = append(clients, c)
	}
	w := Workload{Clients: clients, Keys: 3, Prefix: "/test/", Seed: 1}
	h := NewHistory()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	w.Run(ctx, h)
	if err := w.Final(clients[0], h); err != nil {
		t.Fatal(err)
	}
	counts := h.Counts()
	for _, k := range []string{"get ok", "put ok", "delete ok", "cas ok", "cas failed"} {
		if counts[k] == 0 {
			t.Errorf("no %q call in the history: %s", k, h)
		}
	}
	t.Logf("calls: %s", h)
	if err := h.Check(time.Minute, filepath.Join(t.TempDir(), "history.html")); err != nil {
		t.Fatal(err)
	}
	// A put acknowledged after everything, then a read that misses it.
	end := time.Now()
	h.record(h.newClient(), Input{Kind: Put, Key: "/test/0", Value: "last"}, end, end.Add(time.Millisecond), Output{})
	h.record(h.newClient(), Input{Kind: Get, Key: "/test/0"}, end.Add(2*time.Millisecond), end.Add(3*time.Millisecond), Output{})
	if err := h.Check(time.Minute, filepath.Join(t.TempDir(), "history.html")); err == nil {
		t.Error("a read that missed an acknowledged put passed the check")
	}
}
