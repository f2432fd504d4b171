package robustness

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Workload is concurrent clients putting, getting, deleting and
// comparing-and-swapping a few keys.
type Workload struct {
	// Clients are the etcd clients, one per worker: each may reach
	// another node.
	Clients []*clientv3.Client
	// Keys is how many keys they share (default 5), named Prefix and a
	// number.
	Keys   int
	Prefix string
	// Seed makes each worker's choices repeat.
	Seed uint64
	// Timeout bounds each call (default 2 s); a call that times out is
	// of unknown outcome.
	Timeout time.Duration
}

func (w Workload) keys() int {
	if w.Keys > 0 {
		return w.Keys
	}
	return 5
}

func (w Workload) timeout() time.Duration {
	if w.Timeout > 0 {
		return w.Timeout
	}
	return 2 * time.Second
}

// Run runs the workers until ctx ends, recording every call in h.
func (w Workload) Run(ctx context.Context, h *History) {
	var wg sync.WaitGroup
	for i, c := range w.Clients {
		wg.Go(func() {
			wk := worker{w: w, c: c, h: h, id: h.newClient(), n: i,
				rand: rand.New(rand.NewPCG(w.Seed, uint64(i))), seen: map[string]string{}}
			for ctx.Err() == nil {
				wk.call(wk.next())
			}
		})
	}
	wg.Wait()
}

// Final reads every key once through c, recording it: whatever a write
// acknowledged must be there. A read that fails is tried again for up
// to a minute: a cluster that has just lost power serves again after an
// election, and its clients reconnect.
func (w Workload) Final(c *clientv3.Client, h *History) error {
	wk := worker{w: w, c: c, h: h, id: h.newClient(), seen: map[string]string{}}
	for k := range w.keys() {
		for deadline := time.Now().Add(time.Minute); !wk.call(Input{Kind: Get, Key: w.key(k)}); {
			if time.Now().After(deadline) {
				return fmt.Errorf("the final read of %s failed for a minute", w.key(k))
			}
		}
	}
	return nil
}

func (w Workload) key(k int) string { return w.Prefix + strconv.Itoa(k) }

// failurePause is how long a worker waits after a failed call.
const failurePause = 500 * time.Millisecond

// worker is one client's loop.
type worker struct {
	w    Workload
	c    *clientv3.Client
	h    *History
	id   int
	n    int
	rand *rand.Rand
	// seen is the last value the worker saw of each key: what its
	// compare-and-swaps expect.
	seen   map[string]string
	writes int
}

// next draws the next call: reads 40 %, puts 30 %, compare-and-swaps
// 20 %, deletes 10 %.
func (wk *worker) next() Input {
	key := wk.w.key(wk.rand.IntN(wk.w.keys()))
	r := wk.rand.IntN(10)
	if r < 4 {
		return Input{Kind: Get, Key: key}
	}
	wk.writes++
	value := fmt.Sprintf("w%d-%d", wk.n, wk.writes)
	switch {
	case r < 7:
		return Input{Kind: Put, Key: key, Value: value}
	case r < 9:
		return Input{Kind: CAS, Key: key, Value: value, Expect: wk.seen[key]}
	}
	return Input{Kind: Delete, Key: key}
}

// call makes the call in, records it and says whether it answered. A
// failed read is not recorded (it changed nothing); a failed write is,
// as unknown, and the worker takes a new identity.
func (wk *worker) call(in Input) bool {
	ctx, cancel := context.WithTimeout(context.Background(), wk.w.timeout())
	defer cancel()
	start := time.Now()
	out, err := wk.do(ctx, in)
	end := time.Now()
	if err != nil {
		if in.Kind != Get {
			wk.h.record(wk.id, in, start, end, Output{Unknown: true})
			wk.id = wk.h.newClient()
		}
		// A node that is down refuses at once: without a pause, its
		// worker would fill the history with writes of unknown outcome,
		// each of which the check must place or leave out.
		time.Sleep(failurePause)
		return false
	}
	wk.h.record(wk.id, in, start, end, out)
	return true
}

func (wk *worker) do(ctx context.Context, in Input) (Output, error) {
	switch in.Kind {
	case Get:
		resp, err := wk.c.Get(ctx, in.Key)
		if err != nil || len(resp.Kvs) == 0 {
			return Output{}, err
		}
		v := string(resp.Kvs[0].Value)
		wk.seen[in.Key] = v
		return Output{Found: true, Value: v}, nil
	case Put:
		_, err := wk.c.Put(ctx, in.Key, in.Value)
		wk.seen[in.Key] = in.Value
		return Output{}, err
	case Delete:
		_, err := wk.c.Delete(ctx, in.Key)
		return Output{}, err
	}
	resp, err := wk.c.Txn(ctx).If(clientv3.Compare(clientv3.Value(in.Key), "=", in.Expect)).
		Then(clientv3.OpPut(in.Key, in.Value)).Commit()
	if err != nil {
		return Output{}, err
	}
	if resp.Succeeded {
		wk.seen[in.Key] = in.Value
	}
	return Output{Succeeded: resp.Succeeded}, nil
}
