package robustness

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/borough-os/borough/internal/etcdtest"
)

// These tests guard the suite's own checks against changes that would
// make it prove less than it says, each a mutation an audit made of the
// checker that nothing caught: a check that did not finish taken as a
// pass, the final reads not recorded, writes of unknown outcome dropped.

// TestCheckUnfinishedFails: a check that runs out of time is a failure,
// never a pass. Hundreds of writes of unknown outcome on one key, each
// concurrent with the others, give porcupine more orders to try than a
// millisecond allows.
func TestCheckUnfinishedFails(t *testing.T) {
	h := NewHistory()
	for i := range 400 {
		at(h, i, Input{Kind: Put, Key: "k", Value: fmt.Sprint(i)}, 0, 1000, Output{Unknown: true})
		at(h, 400+i, Input{Kind: Get, Key: "k"}, 1+i, 2+i, Output{Found: true, Value: fmt.Sprint(399 - i)})
	}
	err := h.Check(time.Millisecond, filepath.Join(t.TempDir(), "history.html"))
	if err == nil || !strings.Contains(err.Error(), "did not finish") {
		t.Fatalf("Check of a history it cannot finish in 1 ms = %v, want an error saying it did not finish", err)
	}
}

// TestFinalRecords: the final reads are in the history, one per key, so
// that the check holds them against every acknowledged write.
func TestFinalRecords(t *testing.T) {
	c := client(t, etcdtest.Start(t))
	w := Workload{Clients: []*clientv3.Client{c}, Keys: 4, Prefix: "/final/", Seed: 1}
	h := NewHistory()
	if err := w.Final(c, h); err != nil {
		t.Fatal(err)
	}
	if got := h.Counts()["get ok"]; got != 4 {
		t.Errorf("the final reads left %d reads in the history, want 4 (one per key): %s", got, h)
	}
}

// TestUnknownWritesRecorded: a write whose call fails is in the history,
// of unknown outcome (it may have happened), and its worker takes a new
// identity; a read that fails is not (it changed nothing).
func TestUnknownWritesRecorded(t *testing.T) {
	c := client(t, "127.0.0.1:1")
	h := NewHistory()
	wk := worker{w: Workload{Keys: 1, Prefix: "/x/", Timeout: 200 * time.Millisecond}, c: c, h: h, id: h.newClient(), seen: map[string]string{}}
	first := wk.id
	for _, in := range []Input{{Kind: Put, Key: "/x/0", Value: "v"}, {Kind: Get, Key: "/x/0"}} {
		if wk.call(in) {
			t.Fatalf("%s through a client of nothing answered", in.Kind)
		}
	}
	counts := h.Counts()
	if counts["put unknown"] != 1 || counts["get unknown"] != 0 || len(counts) != 1 {
		t.Errorf("history after a failed put and a failed get: %s; want the put alone, unknown", h)
	}
	if wk.id == first {
		t.Error("the worker kept its identity after a write of unknown outcome")
	}
}

func client(t *testing.T, endpoint string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
