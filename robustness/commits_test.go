package robustness

import (
	"context"
	"errors"
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/borough-os/borough/internal/etcdtest"
)

// TestSettle: against a real etcd, a watch started before the writes
// settles those of unknown outcome: one that committed returns by the
// time the watch saw it, and the history stays linearizable with the
// read that saw it; one that never reached etcd leaves; a delete stays
// open; a watch that missed revisions settles nothing.
func TestSettle(t *testing.T) {
	c := client(t, etcdtest.Start(t))
	for _, tc := range []struct {
		name  string
		lost  error
		want  Settled
		taken int // operations the history keeps
	}{
		{"whole watch", nil, Settled{Took: 2, Not: 1, Open: 1}, 5},
		{"revisions missed", errors.New("compacted"), Settled{Open: 4, Lost: errors.New("compacted")}, 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			prefix := "/" + tc.name + "/"
			w, err := WatchCommits(ctx, c, prefix)
			if err != nil {
				t.Fatal(err)
			}
			h := NewHistory()
			key := prefix + "0"
			// Committed, their callers told nothing: a put and a
			// compare-and-swap.
			if _, err := c.Put(ctx, key, "put-1"); err != nil {
				t.Fatal(err)
			}
			at(h, 0, Input{Kind: Put, Key: key, Value: "put-1"}, 0, 0, Output{Unknown: true})
			if _, err := c.Put(ctx, key, "cas-1"); err != nil {
				t.Fatal(err)
			}
			at(h, 1, Input{Kind: CAS, Key: key, Value: "cas-1", Expect: "put-1"}, 1, 1, Output{Unknown: true})
			// Never reached etcd; a delete of unknown outcome.
			at(h, 2, Input{Kind: Put, Key: key, Value: "lost-1"}, 2, 2, Output{Unknown: true})
			at(h, 3, Input{Kind: Delete, Key: key}, 3, 3, Output{Unknown: true})
			if err := w.Sync(c, prefix, time.Minute); err != nil {
				t.Fatal(err)
			}
			now := int(time.Since(h.base) / time.Millisecond)
			at(h, 4, Input{Kind: Get, Key: key}, now, now+1, Output{Found: true, Value: "cas-1"})
			at(h, 5, Input{Kind: Get, Key: prefix + "1"}, now, now+1, Output{})
			if tc.lost != nil {
				w.fail(tc.lost)
			}
			got := h.Settle(w)
			if got.String() != tc.want.String() {
				t.Errorf("Settle = %v, want %v", got, tc.want)
			}
			if len(h.ops) != tc.taken {
				t.Errorf("the history keeps %d operations, want %d", len(h.ops), tc.taken)
			}
			for _, op := range h.ops {
				if in := op.Input.(Input); tc.lost == nil && in.Kind != Delete && op.Return == math.MaxInt64 {
					t.Errorf("%s %s still open after Settle", in.Kind, in.Value)
				}
			}
			if err := h.Check(time.Minute, filepath.Join(t.TempDir(), "history.html")); err != nil {
				t.Errorf("Check after Settle: %v", err)
			}
		})
	}
}

// TestSettleTooEarly: a write the watch saw returns no earlier than its
// call, whatever the clocks say, and one whose value is read before the
// watch says it was committed still returns by then: a history Settle
// shortened stays one the checker can place.
func TestSettleTooEarly(t *testing.T) {
	h := NewHistory()
	w := &Commits{seen: map[string]time.Time{"v": h.base.Add(5 * time.Millisecond)}, done: make(chan struct{})}
	at(h, 0, Input{Kind: Put, Key: "k", Value: "v"}, 10, 10, Output{Unknown: true})
	at(h, 1, Input{Kind: Get, Key: "k"}, 11, 12, Output{Found: true, Value: "v"})
	h.Settle(w)
	if op := h.ops[0]; op.Return < op.Call {
		t.Errorf("the settled put returns at %d, before its call at %d", op.Return, op.Call)
	}
	if err := h.Check(time.Minute, filepath.Join(t.TempDir(), "history.html")); err != nil {
		t.Errorf("Check after Settle: %v", err)
	}
}
