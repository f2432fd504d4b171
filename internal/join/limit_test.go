package join

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync"
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

// TestLimiterForgets remembers at most maxSources addresses, forgetting
// those whose budget is full again (idle) before a busy one.
func TestLimiterForgets(t *testing.T) {
	l := newLimiter()
	busy := netip.MustParseAddr("192.0.2.1")
	for range sourceBurst {
		l.allow(busy)
	}
	for i := range maxSources - 1 {
		l.allow(netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}))
	}
	// One token each back: the others are idle, busy is not.
	time.Sleep(time.Duration(float64(time.Second) / float64(sourceRate)))
	for i := range 10 {
		l.allow(netip.AddrFrom4([4]byte{10, 1, 0, byte(i)}))
	}
	if len(l.sources) > maxSources {
		t.Errorf("%d sources remembered, want at most %d", len(l.sources), maxSources)
	}
	if l.sources[busy] == nil {
		t.Error("a busy source was forgotten while idle ones were remembered")
	}
}
