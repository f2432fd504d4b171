package soak

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/borough-os/borough/internal/follow"
)

// Load is the soak's steady load through one client.
type Load struct {
	Client *clientv3.Client
	// Prefix names every key the load writes.
	Prefix string
	// Rate is puts a second (default 40), over Keys keys (default 500)
	// of Value random bytes (default 1024).
	Rate, Keys, Value int
	// CompactEvery is how often the load compacts, at the revision of
	// its round before (default 2 minutes).
	CompactEvery time.Duration
}

// Tally counts what the load did; it is safe to read while it runs.
type Tally struct {
	Puts, PutErrors          atomic.Int64
	Leases, LeaseErrors      atomic.Int64
	Compactions, CompactErrs atomic.Int64
	// Seen is how many puts of the load's keys the watch saw; Resumed how
	// often it had to watch again (a member restarted), Compacted how
	// often it found the revision it resumed from compacted away, which
	// would lose events.
	Seen, Resumed, Compacted atomic.Int64
	// KeptAlive says whether the lease kept alive all along still held
	// its key at the end.
	KeptAlive bool
}

func (t *Tally) String() string {
	return fmt.Sprintf("puts %d acknowledged, %d failed; watch saw %d puts, resumed %d times, %d times from a compacted revision; "+
		"leases %d granted, %d failed; compactions %d, %d failed; lease kept alive: %v",
		t.Puts.Load(), t.PutErrors.Load(), t.Seen.Load(), t.Resumed.Load(), t.Compacted.Load(),
		t.Leases.Load(), t.LeaseErrors.Load(), t.Compactions.Load(), t.CompactErrs.Load(), t.KeptAlive)
}

// Check says what the tally shows went wrong: a put acknowledged that
// the watch never saw (unless the watch lost its place to a compaction,
// which it then says), a lease kept alive that lost its key, or a load
// that did nearly nothing.
func (t *Tally) Check() error {
	var errs []error
	if t.Puts.Load() == 0 {
		errs = append(errs, errors.New("no put was acknowledged"))
	}
	if t.Compacted.Load() > 0 {
		errs = append(errs, fmt.Errorf("the watch resumed %d times from a revision compacted away", t.Compacted.Load()))
	} else if seen, puts := t.Seen.Load(), t.Puts.Load(); seen < puts {
		errs = append(errs, fmt.Errorf("the watch saw %d puts, fewer than the %d acknowledged", seen, puts))
	}
	if !t.KeptAlive {
		errs = append(errs, errors.New("the lease kept alive all along lost its key"))
	}
	return errors.Join(errs...)
}

func (l Load) rate() int {
	if l.Rate > 0 {
		return l.Rate
	}
	return 40
}

func (l Load) keys() int {
	if l.Keys > 0 {
		return l.Keys
	}
	return 500
}

func (l Load) value() int {
	if l.Value > 0 {
		return l.Value
	}
	return 1024
}

func (l Load) compactEvery() time.Duration {
	if l.CompactEvery > 0 {
		return l.CompactEvery
	}
	return 2 * time.Minute
}

// Run keeps the load up until ctx ends, then checks the lease kept alive
// and returns the tally.
func (l Load) Run(ctx context.Context) (*Tally, error) {
	t := &Tally{}
	alive, err := l.keepAlive(ctx)
	if err != nil {
		return nil, err
	}
	start, err := l.Client.Get(ctx, l.Prefix+"start")
	if err != nil {
		return nil, fmt.Errorf("soak: the load's first read: %w", err)
	}
	wctx, stopWatch := context.WithCancel(context.Background())
	defer stopWatch()
	var watched atomic.Int64
	watching := make(chan struct{})
	go func() {
		l.watch(wctx, start.Header.Revision+1, t, &watched)
		close(watching)
	}()
	var wg sync.WaitGroup
	var last atomic.Int64
	wg.Go(func() { l.put(ctx, t, &last) })
	wg.Go(func() { l.lease(ctx, t) })
	wg.Go(func() { l.compact(ctx, t) })
	wg.Wait()
	t.KeptAlive = l.holds(alive)
	// The watch may trail the last puts by a moment: give it until it
	// has passed the last acknowledged one.
	for wait := time.Now().Add(30 * time.Second); watched.Load() < last.Load() && time.Now().Before(wait); {
		time.Sleep(100 * time.Millisecond)
	}
	stopWatch()
	<-watching
	return t, nil
}

// key is the load's i-th key.
func (l Load) key(i int) string { return l.Prefix + "k/" + strconv.Itoa(i) }

// put puts at the load's rate until ctx ends.
// last is the revision of the latest acknowledged put.
func (l Load) put(ctx context.Context, t *Tally, last *atomic.Int64) {
	tick := time.NewTicker(time.Second / time.Duration(l.rate()))
	defer tick.Stop()
	value := make([]byte, l.value())
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		_, _ = rand.Read(value)
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		resp, err := l.Client.Put(cctx, l.key(i%l.keys()), string(value))
		cancel()
		if err == nil {
			t.Puts.Add(1)
			last.Store(max(last.Load(), resp.Header.Revision))
		} else if ctx.Err() == nil {
			t.PutErrors.Add(1)
		}
	}
}

// watch counts the puts of the load's keys from rev on (package follow
// watches again whenever the watch ends: a member restarted), and keeps
// in watched the revision it has seen up to. A revision compacted before
// the watch reached it is counted, and the watch goes on from the
// compaction.
func (l Load) watch(ctx context.Context, rev int64, t *Tally, watched *atomic.Int64) {
	w := follow.Watch{Client: l.Client, Prefix: l.Prefix + "k/", Resumed: func() { t.Resumed.Add(1) },
		Each: func(resp clientv3.WatchResponse) {
			for _, ev := range resp.Events {
				if ev.Type == clientv3.EventTypePut {
					t.Seen.Add(1)
				}
			}
			watched.Store(resp.Header.Revision)
		}}
	for {
		compacted, err := w.From(ctx, rev)
		if err == nil {
			return
		}
		t.Compacted.Add(1)
		rev = compacted
	}
}

// lease grants a lease of 5 s each second and puts a key under it: they
// expire by the dozen, as sessions and locks do.
func (l Load) lease(ctx context.Context, t *Tally) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := l.leased(cctx, l.Prefix+"lease/"+strconv.Itoa(i%100))
		cancel()
		if err == nil {
			t.Leases.Add(1)
		} else if ctx.Err() == nil {
			t.LeaseErrors.Add(1)
		}
	}
}

func (l Load) leased(ctx context.Context, key string) error {
	g, err := l.Client.Grant(ctx, 5)
	if err != nil {
		return err
	}
	_, err = l.Client.Put(ctx, key, "x", clientv3.WithLease(g.ID))
	return err
}

// compact compacts every CompactEvery at the revision its round before
// read, leaving the history of the last round for watches to resume in.
func (l Load) compact(ctx context.Context, t *Tally) {
	tick := time.NewTicker(l.compactEvery())
	defer tick.Stop()
	var prev int64
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		resp, err := l.Client.Get(cctx, l.Prefix+"start")
		if err == nil && prev > 0 {
			_, err = l.Client.Compact(cctx, prev)
			if err == nil || errors.Is(err, rpctypes.ErrCompacted) {
				t.Compactions.Add(1)
			}
		}
		cancel()
		if err != nil && !errors.Is(err, rpctypes.ErrCompacted) && ctx.Err() == nil {
			t.CompactErrs.Add(1)
		}
		if err == nil {
			prev = resp.Header.Revision
		}
	}
}

// keepAlive grants a lease of 10 s, kept alive until ctx ends, and puts
// a key under it: it must hold the key for the whole run, member
// restarts included.
func (l Load) keepAlive(ctx context.Context) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	g, err := l.Client.Grant(cctx, 10)
	if err != nil {
		return "", fmt.Errorf("soak: granting the lease kept alive: %w", err)
	}
	key := l.Prefix + "alive"
	if _, err := l.Client.Put(cctx, key, "x", clientv3.WithLease(g.ID)); err != nil {
		return "", fmt.Errorf("soak: putting the key of the lease kept alive: %w", err)
	}
	ch, err := l.Client.KeepAlive(ctx, g.ID)
	if err != nil {
		return "", fmt.Errorf("soak: keeping the lease alive: %w", err)
	}
	go func() {
		for range ch {
		}
	}()
	return key, nil
}

// holds says whether key is still there.
func (l Load) holds(key string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := l.Client.Get(ctx, key)
	return err == nil && len(resp.Kvs) == 1
}
