package join

import (
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestLimiter floods the limiter from one address, then from another,
// and holds maxInFlight requests while one more comes.
func TestLimiter(t *testing.T) {
	l := newLimiter()
	release := make(chan struct{})
	var started sync.WaitGroup
	h := l.wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			started.Done()
			<-release
		}
	}))
	ask := func(from, path string) int {
		r := httptest.NewRequest(http.MethodPost, path, nil)
		r.RemoteAddr = from
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	for _, tc := range []struct {
		name  string
		from  string
		times int
		want  int
	}{
		{"a source's burst", "192.0.2.1:4000", sourceBurst, http.StatusOK},
		{"the same source past its burst", "192.0.2.1:4001", 1, http.StatusTooManyRequests},
		{"the same address over IPv6-mapped IPv4", "[::ffff:192.0.2.1]:4002", 1, http.StatusTooManyRequests},
		{"another source", "192.0.2.2:4000", sourceBurst, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for i := range tc.times {
				if got := ask(tc.from, "/"); got != tc.want {
					t.Fatalf("request %d from %s: %d, want %d", i+1, tc.from, got, tc.want)
				}
			}
		})
	}

	t.Run("more than maxInFlight at once", func(t *testing.T) {
		started.Add(maxInFlight)
		done := make(chan int, maxInFlight)
		for i := range maxInFlight {
			go func() {
				done <- ask(netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 51, 100, byte(i + 1)}), 4000).String(), "/hold")
			}()
		}
		started.Wait()
		if got := ask("203.0.113.1:4000", "/"); got != http.StatusServiceUnavailable {
			t.Errorf("a request while %d are under way: %d, want %d", maxInFlight, got, http.StatusServiceUnavailable)
		}
		close(release)
		for range maxInFlight {
			if got := <-done; got != http.StatusOK {
				t.Errorf("a held request: %d, want 200", got)
			}
		}
		if got := ask("203.0.113.1:4000", "/"); got != http.StatusOK {
			t.Errorf("a request once they are done: %d, want 200", got)
		}
	})
}

// TestBudgetsForget remembers at most maxSources addresses, forgetting
// those whose budget is full again (idle) before a busy one.
func TestBudgetsForget(t *testing.T) {
	now := time.Now()
	b := budgets{clock: func() time.Time { return now }}
	busy := netip.MustParseAddr("192.0.2.1")
	for range sourceBurst {
		b.allow(busy)
	}
	for i := range maxSources - 1 {
		b.allow(netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}))
	}
	// One token each back: the others are idle, busy is not.
	now = now.Add(time.Duration(float64(time.Second) / float64(sourceRate)))
	for i := range 10 {
		b.allow(netip.AddrFrom4([4]byte{10, 1, 0, byte(i)}))
	}
	if len(b.sources) > maxSources {
		t.Errorf("%d sources remembered, want at most %d", len(b.sources), maxSources)
	}
	if b.sources[busy] == nil {
		t.Error("a busy source was forgotten while idle ones were remembered")
	}
}

// TestLimitConns floods a listener with connections from one address:
// past its burst, each is closed before the server sees it, while
// another address still gets through.
func TestLimitConns(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	limited := limitConns(l)
	defer limited.Close()
	accepted := make(chan net.Conn, 2*sourceBurst)
	go func() {
		for {
			c, err := limited.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	// dial opens n connections from the loopback address from, then
	// says how many the server kept: a closed one is reset, at once or
	// at its first read.
	dial := func(from string, n int) (int, time.Duration) {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
		start := time.Now()
		var conns []net.Conn
		for range n {
			c, err := d.Dial("tcp", l.Addr().String())
			if errors.Is(err, syscall.ECONNRESET) {
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			conns = append(conns, c)
		}
		took := time.Since(start)
		var kept atomic.Int32
		var wg sync.WaitGroup
		for _, c := range conns {
			wg.Go(func() {
				c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
				if _, err := c.Read(make([]byte, 1)); errors.Is(err, os.ErrDeadlineExceeded) {
					kept.Add(1)
				}
			})
		}
		wg.Wait()
		return int(kept.Load()), took
	}
	kept, took := dial("127.0.0.1", 2*sourceBurst)
	// The burst, and what the budget refilled while the dials took.
	if refilled := int(took.Seconds()*float64(sourceRate)) + 1; kept < sourceBurst || kept > sourceBurst+refilled {
		t.Errorf("%d of %d connections from one address kept in %v, want its burst of %d", kept, 2*sourceBurst, took, sourceBurst)
	}
	if other, _ := dial("127.0.0.2", 1); other != 1 {
		t.Error("another address's connection was closed")
	}
	if len(accepted) != kept+1 {
		t.Errorf("the server accepted %d connections, want the %d kept", len(accepted), kept+1)
	}
}
