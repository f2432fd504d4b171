//go:build boot

package boottest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// goApp is a Go application on etcd's standard client, as people write
// them: candidates of an election (clientv3/concurrency, each on a lease
// of its own session) whose leader writes a log under its leadership, a
// write guarded by its election key, and watchers of that log. Each
// candidate and watcher has a client of its own over every endpoint, as
// an application credential.
type goApp struct {
	prefix string
	// candidates and watchers stop apart: the log is read once the
	// candidates have stopped, and the watchers must catch up with it.
	candidates, watchers party

	mu sync.Mutex
	// acked is each candidate's acknowledged log writes: the revision
	// etcd gave each, and the term (the create revision of the leader's
	// election key) it was written in.
	acked map[int64]int64
	terms int
	// watched is each watcher's revisions of the log, in the order seen;
	// rewatches how often a watcher's channel closed and it watched again.
	watched   [][]int64
	rewatches int
}

// party is goroutines that stop together.
type party struct {
	stop chan struct{}
	wg   sync.WaitGroup
}

// run runs f with c in a goroutine of the party, until it stops.
func (p *party) run(c *clientv3.Client, f func(context.Context, *clientv3.Client)) {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer c.Close()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			select {
			case <-p.stop:
			case <-ctx.Done():
			}
			cancel()
		}()
		f(ctx, c)
	}()
}

// end stops the party and waits for it.
func (p *party) end() {
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	p.wg.Wait()
}

// goAppTTL is the candidates' session lease.
const goAppTTL = 5

// startGoApp starts candidates and watchers under prefix, through the
// client ports eps with the CA and credential files given; they run
// until check, or until life ends.
func startGoApp(t, life *testing.T, candidates, watchers int, prefix string, eps []string, ca, cert, key string) *goApp {
	t.Helper()
	roots := x509.NewCertPool()
	b, err := os.ReadFile(ca)
	if err != nil {
		t.Fatal(err)
	}
	roots.AppendCertsFromPEM(b)
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	connect := func() *clientv3.Client {
		c, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 10 * time.Second,
			TLS: &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}}})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	a := &goApp{prefix: prefix, acked: map[int64]int64{}, watched: make([][]int64, watchers),
		candidates: party{stop: make(chan struct{})}, watchers: party{stop: make(chan struct{})}}
	life.Cleanup(func() {
		a.candidates.end()
		a.watchers.end()
	})
	first := connect()
	defer first.Close()
	start, err := first.Get(context.Background(), prefix+"start")
	if err != nil {
		t.Fatalf("the application's first read: %v", err)
	}
	for i := range watchers {
		a.watchers.run(connect(), func(ctx context.Context, c *clientv3.Client) { a.watch(ctx, c, i, start.Header.Revision+1) })
	}
	for i := range candidates {
		a.candidates.run(connect(), func(ctx context.Context, c *clientv3.Client) { a.campaign(ctx, c, "candidate-"+strconv.Itoa(i)) })
	}
	return a
}

// campaign runs for the election over and over: elected, it writes up
// to ten entries of the log, each only while its election key is the one
// it was elected with, then resigns.
func (a *goApp) campaign(ctx context.Context, c *clientv3.Client, name string) {
	for ctx.Err() == nil {
		s, err := concurrency.NewSession(c, concurrency.WithTTL(goAppTTL), concurrency.WithContext(ctx))
		if err != nil {
			pause(ctx, time.Second)
			continue
		}
		e := concurrency.NewElection(s, a.prefix+"election")
		if err := e.Campaign(ctx, name); err == nil {
			a.lead(ctx, c, s, e)
			resign, done := context.WithTimeout(context.Background(), 5*time.Second)
			e.Resign(resign)
			done()
		}
		s.Close()
	}
}

// lead writes the log under e's leadership while the session lasts.
func (a *goApp) lead(ctx context.Context, c *clientv3.Client, s *concurrency.Session, e *concurrency.Election) {
	term, key := e.Rev(), e.Key()
	a.mu.Lock()
	a.terms++
	a.mu.Unlock()
	for i := 0; i < 10; i++ {
		select {
		case <-ctx.Done():
			return
		case <-s.Done():
			return
		case <-time.After(300 * time.Millisecond):
		}
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		resp, err := c.Txn(wctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", term)).
			Then(clientv3.OpPut(fmt.Sprintf("%slog/%020d-%02d", a.prefix, term, i), key)).Commit()
		cancel()
		if err != nil || !resp.Succeeded {
			return
		}
		a.mu.Lock()
		a.acked[resp.Header.Revision] = term
		a.mu.Unlock()
	}
}

// watch watches the log from revision from, and again from the revision
// after the last it saw whenever its channel closes.
func (a *goApp) watch(ctx context.Context, c *clientv3.Client, i int, from int64) {
	for ctx.Err() == nil {
		for resp := range c.Watch(clientv3.WithRequireLeader(ctx), a.prefix+"log/", clientv3.WithPrefix(), clientv3.WithRev(from)) {
			a.mu.Lock()
			for _, ev := range resp.Events {
				a.watched[i] = append(a.watched[i], ev.Kv.ModRevision)
				from = ev.Kv.ModRevision + 1
			}
			a.mu.Unlock()
		}
		if ctx.Err() == nil {
			a.mu.Lock()
			a.rewatches++
			a.mu.Unlock()
			pause(ctx, 500*time.Millisecond)
		}
	}
}

func pause(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// check stops the app and checks what it did against the log in etcd,
// read through c: every acknowledged write is there; the log's terms
// never go back (no leader wrote once a later one had, so no two led at
// once); and each watcher saw every revision of the log once, in order.
func (a *goApp) check(t *testing.T, c *clientv3.Client) {
	t.Helper()
	a.candidates.end()
	ctx := timeout(t, time.Minute)
	log, err := c.Get(ctx, a.prefix+"log/", clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByModRevision, clientv3.SortAscend))
	if err != nil {
		t.Fatalf("reading the application's log: %v", err)
	}
	var revs []int64
	for _, kv := range log.Kvs {
		revs = append(revs, kv.ModRevision)
	}
	if err := waitUntil(time.Minute, func() error {
		a.mu.Lock()
		defer a.mu.Unlock()
		for i, w := range a.watched {
			if len(w) < len(revs) {
				return fmt.Errorf("watcher %d saw %d of the log's %d revisions", i, len(w), len(revs))
			}
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
	a.watchers.end()

	logTerm := map[int64]int64{}
	var last int64
	for _, kv := range log.Kvs {
		term, _, _ := strings.Cut(strings.TrimPrefix(string(kv.Key), a.prefix+"log/"), "-")
		n, _ := strconv.ParseInt(term, 10, 64)
		if n < last {
			t.Errorf("the log at revision %d was written in term %d after term %d had written: two leaders at once", kv.ModRevision, n, last)
		}
		last, logTerm[kv.ModRevision] = n, n
	}
	for rev, term := range a.acked {
		if logTerm[rev] != term {
			t.Errorf("a write acknowledged at revision %d in term %d is not in the log", rev, term)
		}
	}
	for i, w := range a.watched {
		if !slices.Equal(w, revs) {
			t.Errorf("watcher %d saw revisions %v; the log has %v", i, w, revs)
		}
	}
	t.Logf("the Go application: %d leaderships, %d log writes acknowledged, %d in the log, each seen once and in order by %d watchers (%d rewatches)",
		a.terms, len(a.acked), len(revs), len(a.watched), a.rewatches)
	if len(a.acked) == 0 || a.terms < 2 {
		t.Errorf("the application wrote %d entries in %d leaderships: too few to tell anything", len(a.acked), a.terms)
	}
}
