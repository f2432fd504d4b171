package join

import (
	"net"
	"net/http"
	"net/netip"
	"sync"

	"golang.org/x/time/rate"
)

// Limits of the join endpoint, which anyone on the network can reach
// before they hold anything: each request costs etcd a linearizable read
// in the process etcd runs in, so a flood is turned away before it gets
// there. A joining node asks a handful of times, a member that lost its
// leader once every 10 s; sources share no budget, so a flood from one
// address leaves the others theirs.
const (
	// sourceRate and sourceBurst are what one source address may ask.
	sourceRate  = rate.Limit(2)
	sourceBurst = 10
	// maxInFlight bounds the requests served at once, from all sources.
	maxInFlight = 4
	// maxSources bounds the addresses remembered; idle ones go first.
	maxSources = 1024
)

// limiter turns away a source that asks too often (429) and any request
// while maxInFlight are under way (503); a joining node retries either.
type limiter struct {
	mu       sync.Mutex
	sources  map[netip.Addr]*rate.Limiter
	inFlight chan struct{}
}

func newLimiter() *limiter {
	return &limiter{sources: map[netip.Addr]*rate.Limiter{}, inFlight: make(chan struct{}, maxInFlight)}
}

// wrap limits next.
func (l *limiter) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !l.allow(source(r)) {
			w.Header().Set("Retry-After", "1")
			http.Error(w, "too many requests from this address", http.StatusTooManyRequests)
			return
		}
		select {
		case l.inFlight <- struct{}{}:
			defer func() { <-l.inFlight }()
		default:
			w.Header().Set("Retry-After", "1")
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// allow takes one request from a's budget. Once maxSources addresses are
// remembered, those whose budget is full again are forgotten, or, if none
// is, all: maxInFlight still bounds what a flood from many addresses
// costs.
func (l *limiter) allow(a netip.Addr) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	lim, ok := l.sources[a]
	if !ok {
		if len(l.sources) >= maxSources {
			l.forgetIdle()
		}
		lim = rate.NewLimiter(sourceRate, sourceBurst)
		l.sources[a] = lim
	}
	return lim.Allow()
}

func (l *limiter) forgetIdle() {
	for a, lim := range l.sources {
		if lim.Tokens() >= sourceBurst {
			delete(l.sources, a)
		}
	}
	if len(l.sources) >= maxSources {
		clear(l.sources)
	}
}

// source is the address a request came from.
func source(r *http.Request) netip.Addr {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}
	}
	a, _ := netip.ParseAddr(host)
	return a.Unmap()
}
