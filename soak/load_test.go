package soak

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/borough-os/borough/internal/etcdtest"
)

// TestLoad runs the load against a real etcd for a few seconds, with a
// compaction each second: every acknowledged put is seen by the watch,
// leases are granted, compactions happen, the lease kept alive keeps its
// key, and what is left is the fixed set of keys.
func TestLoad(t *testing.T) {
	cl, err := clientv3.New(clientv3.Config{Endpoints: []string{etcdtest.Start(t)}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	l := Load{Client: cl, Prefix: "soak/", Rate: 100, Keys: 20, Value: 100, CompactEvery: time.Second}
	tally, err := l.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(tally)
	if err := tally.Check(); err != nil {
		t.Error(err)
	}
	if tally.Leases.Load() == 0 || tally.Compactions.Load() == 0 {
		t.Errorf("the load granted %d leases and compacted %d times in 4 s", tally.Leases.Load(), tally.Compactions.Load())
	}
	keys, err := cl.Get(context.Background(), "soak/k/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if keys.Count != 20 {
		t.Errorf("the load left %d keys, want its 20", keys.Count)
	}
}
