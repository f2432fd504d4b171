package robustness

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/borough-os/borough/internal/follow"
)

// Commits is a watch of the workload's keys from before its first call:
// every value a write committed, with when the watch first heard of it.
// Writes are what make a check slow: one of unknown outcome stays open
// until the end of time, so the checker may place it anywhere after its
// call or nowhere, and a long run under faults leaves hundreds (a
// 20-minute run, some 420 over five keys: its check of 51,594 operations
// did not finish in five minutes). Since every write puts a value no
// other puts, a watch that missed no revision tells which of them took
// effect and by when (Settle), as etcd's own robustness suite learns it
// from its watch.
type Commits struct {
	mu   sync.Mutex
	seen map[string]time.Time
	// lost says why the watch missed revisions, if it did.
	lost error
	done chan struct{}
}

// WatchCommits watches prefix through c, from the revision after the
// store's current one, until ctx ends (package follow watches again when
// a member ends the watch). It is to start before the workload does.
func WatchCommits(ctx context.Context, c *clientv3.Client, prefix string) (*Commits, error) {
	resp, err := c.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return nil, fmt.Errorf("watching %s: the store's revision: %w", prefix, err)
	}
	w := &Commits{seen: map[string]time.Time{}, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		if _, err := (follow.Watch{Client: c, Prefix: prefix, Each: w.add}).From(ctx, resp.Header.Revision+1); err != nil {
			w.fail(err)
		}
	}()
	return w, nil
}

func (w *Commits) add(resp clientv3.WatchResponse) {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, ev := range resp.Events {
		if _, ok := w.seen[string(ev.Kv.Value)]; ev.Type == clientv3.EventTypePut && !ok {
			w.seen[string(ev.Kv.Value)] = now
		}
	}
}

func (w *Commits) fail(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lost = err
}

// Sync puts a value of its own under prefix through c and waits, up to
// timeout, until the watch sees it: the watch then has every revision
// before it, as a watch delivers them in order. A watch that does not
// catch up is marked as missing revisions.
func (w *Commits) Sync(c *clientv3.Client, prefix string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	mark := "sync-" + strconv.FormatInt(time.Now().UnixNano(), 10)
	if _, err := c.Put(ctx, prefix+"watch-sync", mark); err != nil {
		return fmt.Errorf("syncing the watch of %s: %w", prefix, err)
	}
	for {
		w.mu.Lock()
		_, seen := w.seen[mark]
		lost := w.lost
		w.mu.Unlock()
		switch {
		case lost != nil:
			return lost
		case seen:
			return nil
		}
		select {
		case <-ctx.Done():
			err := fmt.Errorf("the watch of %s did not see a write of %v ago", prefix, timeout)
			w.fail(err)
			return err
		case <-w.done:
			w.fail(errors.New("the watch ended"))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Settled counts what Settle did with the writes of unknown outcome.
type Settled struct {
	// Took and Not are the puts and compare-and-swaps the watch saw take
	// effect and saw not; Open are those left open (deletes, which put no
	// value to tell them by, or every write when the watch missed
	// revisions); Lost says why it missed them.
	Took, Not, Open int
	Lost            error
}

func (s Settled) String() string {
	if s.Lost != nil {
		return fmt.Sprintf("%d left open: the watch is not whole (%v)", s.Open, s.Lost)
	}
	return fmt.Sprintf("%d took effect, %d did not, %d left open (deletes)", s.Took, s.Not, s.Open)
}

// Settle decides h's writes of unknown outcome by what the watch saw,
// once it is synced (Sync): a put or compare-and-swap whose value the
// watch saw committed took effect, by the time the watch heard of it at
// the latest, so it returns then (a compare-and-swap, as succeeded); one
// whose value it never saw did not, and leaves the history, as a call
// that changed nothing. A watch that missed revisions decides nothing.
func (h *History) Settle(w *Commits) Settled {
	w.mu.Lock()
	defer w.mu.Unlock()
	h.mu.Lock()
	defer h.mu.Unlock()
	var s Settled
	kept := h.ops[:0]
	for _, op := range h.ops {
		in, out := op.Input.(Input), op.Output.(Output)
		if !out.Unknown || op.Return != math.MaxInt64 {
			kept = append(kept, op)
			continue
		}
		at, seen := w.seen[in.Value]
		switch {
		case w.lost != nil || in.Kind == Delete:
			s.Open++
		case seen:
			s.Took++
			op.Return = max(op.Call, int64(at.Sub(h.base)))
			op.Output = Output{Succeeded: in.Kind == CAS}
		default:
			s.Not++
			continue
		}
		kept = append(kept, op)
	}
	h.ops = kept
	s.Lost = w.lost
	return s
}
