// Package load drives an etcd cluster as etcd's benchmark tool
// (go.etcd.io/etcd/tools/benchmark) does: a number of clients, sharing a
// number of gRPC connections, send requests back to back for a while, and
// every request's latency is kept. It serves make bench, which runs the
// same loads against a Borough cluster and against plain etcd in the same
// VMs.
//
// It is written here rather than run as etcd's tool because the tool's
// module (go.etcd.io/etcd/tools/v3, and the root module go.etcd.io/etcd/v3
// that held it before) is not served by the Go module proxy this project
// builds from. Its two loads are the tool's put and range: random keys of
// KeySize bytes in a key space of KeySpace keys, values of ValueSize
// bytes, linearizable reads unless Serializable; a connection per
// endpoint in turn, as the tool hands them out.
package load

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Kind is what a load asks of etcd.
type Kind string

// Loads.
const (
	Put   Kind = "put"
	Range Kind = "range"
)

// Params is one load.
type Params struct {
	Kind Kind
	// Clients send requests at once; Conns connections carry them
	// (client i uses connection i mod Conns).
	Clients, Conns int
	// For is how long the clients send.
	For time.Duration
	// KeySize, ValueSize and KeySpace shape the keys and values.
	KeySize, ValueSize, KeySpace int
	// Serializable reads from the member the client is connected to,
	// without asking the leader.
	Serializable bool
}

// Name is the load as a benchmark names it: "put-16" for puts from 16
// clients.
func (p Params) Name() string {
	name := fmt.Sprintf("%s-%d", p.Kind, p.Clients)
	if p.Serializable {
		name += "-serializable"
	}
	return name
}

func (p Params) check() error {
	var problems []string
	if p.Kind != Put && p.Kind != Range {
		problems = append(problems, fmt.Sprintf("kind %q is neither put nor range", p.Kind))
	}
	if p.Clients < 1 || p.Conns < 1 || p.Conns > p.Clients {
		problems = append(problems, fmt.Sprintf("%d clients over %d connections (want 1 <= connections <= clients)", p.Clients, p.Conns))
	}
	if p.For <= 0 {
		problems = append(problems, fmt.Sprintf("duration %v", p.For))
	}
	if p.KeySize < 1 || p.KeySpace < 1 || p.ValueSize < 0 {
		problems = append(problems, fmt.Sprintf("keys of %d bytes in a space of %d, values of %d bytes", p.KeySize, p.KeySpace, p.ValueSize))
	}
	if len(problems) > 0 {
		return fmt.Errorf("load %s: %s", p.Name(), strings.Join(problems, "; "))
	}
	return nil
}

// Result is what a load measured.
type Result struct {
	// Latencies are every request's, in the order they ended.
	Latencies []time.Duration
	// Took is from the first request's start to the last one's end.
	Took time.Duration
}

// Throughput is requests per second.
func (r Result) Throughput() float64 {
	if r.Took <= 0 {
		return 0
	}
	return float64(len(r.Latencies)) / r.Took.Seconds()
}

// Percentile is the latency that a fraction p (0 < p <= 1) of the requests
// took at most.
func (r Result) Percentile(p float64) time.Duration {
	if len(r.Latencies) == 0 {
		return 0
	}
	sorted := slices.Clone(r.Latencies)
	slices.Sort(sorted)
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// Dial connects to one endpoint.
type Dial func(endpoint string) (*clientv3.Client, error)

// requestTimeout bounds one request: a request that takes longer fails
// the load, for a healthy cluster answers far sooner.
const requestTimeout = 30 * time.Second

// Run runs a load against endpoints, connection i to endpoint i mod
// len(endpoints). It fails on the first request that fails.
func Run(ctx context.Context, dial Dial, endpoints []string, p Params) (Result, error) {
	if err := p.check(); err != nil {
		return Result{}, err
	}
	if len(endpoints) == 0 {
		return Result{}, fmt.Errorf("load %s: no endpoints", p.Name())
	}
	conns := make([]*clientv3.Client, p.Conns)
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}()
	for i := range conns {
		c, err := dial(endpoints[i%len(endpoints)])
		if err != nil {
			return Result{}, fmt.Errorf("load %s: connecting to %s: %w", p.Name(), endpoints[i%len(endpoints)], err)
		}
		conns[i] = c
	}
	if p.Kind == Range {
		if err := do(ctx, conns[0], Params{Kind: Put, ValueSize: p.ValueSize}, rangeKey); err != nil {
			return Result{}, fmt.Errorf("load %s: writing the key it reads: %w", p.Name(), err)
		}
	}
	return run(ctx, conns, p)
}

// run sends requests from p.Clients goroutines until p.For has passed.
func run(parent context.Context, conns []*clientv3.Client, p Params) (Result, error) {
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	var (
		mu     sync.Mutex
		lat    []time.Duration
		failed error
		wg     sync.WaitGroup
	)
	start := time.Now()
	end := start.Add(p.For)
	for i := range p.Clients {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(i), uint64(start.UnixNano())))
			for time.Now().Before(end) && ctx.Err() == nil {
				t := time.Now()
				err := do(ctx, conns[i%len(conns)], p, key(r, p))
				took := time.Since(t)
				mu.Lock()
				if err != nil && failed == nil {
					failed = err
					cancel()
				}
				if err == nil {
					lat = append(lat, took)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	if failed == nil && parent.Err() != nil {
		// A context that ends between two requests stops the clients
		// without a failed request: the load was still cut short.
		failed = fmt.Errorf("cut off after %v of %v: %w", took.Round(time.Millisecond), p.For, parent.Err())
	}
	if failed != nil {
		return Result{}, fmt.Errorf("load %s: %w", p.Name(), failed)
	}
	return Result{Latencies: lat, Took: took}, nil
}

// key draws a key of the load's key space, KeySize bytes long.
func key(r *rand.Rand, p Params) string {
	k := fmt.Sprintf("%0*d", p.KeySize, r.IntN(p.KeySpace))
	return k[len(k)-p.KeySize:]
}

// rangeKey is the key a range load reads, as the tool reads the one key
// it is given.
const rangeKey = "load-range"

// do sends one request of the load's kind: a put of k, or a read of
// rangeKey.
func do(ctx context.Context, c *clientv3.Client, p Params, k string) error {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	var err error
	switch p.Kind {
	case Put:
		_, err = c.Put(ctx, k, strings.Repeat("v", p.ValueSize))
	case Range:
		var opts []clientv3.OpOption
		if p.Serializable {
			opts = append(opts, clientv3.WithSerializable())
		}
		_, err = c.Get(ctx, rangeKey, opts...)
	}
	return err
}
