package join

import (
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Limits of the join endpoint, which anyone on the network can reach
// before they hold anything: each request costs etcd a linearizable read
// in the process etcd runs in, and each connection a TLS handshake there,
// so a flood is turned away before it gets that far. A joining node asks
// a handful of times, one connection a request, and a member that lost
// its leader once every 10 s; sources share no budget, so a flood from
// one address leaves the others theirs.
const (
	// sourceRate and sourceBurst are what one source address may ask,
	// and how many connections it may open.
	sourceRate  = rate.Limit(2)
	sourceBurst = 10
	// maxInFlight bounds the requests served at once, from all sources.
	maxInFlight = 4
	// maxSources bounds the addresses remembered; idle ones go first.
	maxSources = 1024
)

// budgets are the sources' budgets of one thing, requests or connections.
type budgets struct {
	mu      sync.Mutex
	sources map[netip.Addr]*rate.Limiter
	// clock is the time budgets fill by, time.Now unless a test sets it.
	clock func() time.Time
}

// allow takes one from a's budget. Once maxSources addresses are
// remembered, those whose budget is full again are forgotten, or, if none
// is, all: maxInFlight still bounds what a flood from many addresses
// costs.
func (b *budgets) allow(a netip.Addr) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.sources == nil {
		b.sources = map[netip.Addr]*rate.Limiter{}
	}
	now := time.Now()
	if b.clock != nil {
		now = b.clock()
	}
	lim, ok := b.sources[a]
	if !ok {
		if len(b.sources) >= maxSources {
			b.forgetIdle(now)
		}
		lim = rate.NewLimiter(sourceRate, sourceBurst)
		b.sources[a] = lim
	}
	return lim.AllowN(now, 1)
}

func (b *budgets) forgetIdle(now time.Time) {
	for a, lim := range b.sources {
		if lim.TokensAt(now) >= sourceBurst {
			delete(b.sources, a)
		}
	}
	if len(b.sources) >= maxSources {
		clear(b.sources)
	}
}

// limiter turns away a source that asks too often (429) and any request
// while maxInFlight are under way (503); a joining node retries either.
type limiter struct {
	requests budgets
	inFlight chan struct{}
}

func newLimiter() *limiter {
	return &limiter{inFlight: make(chan struct{}, maxInFlight)}
}

// wrap limits next.
func (l *limiter) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !l.requests.allow(source(r)) {
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

// source is the address a request came from.
func source(r *http.Request) netip.Addr {
	return addrOf(r.RemoteAddr)
}

// addrOf is the address of "host:port", IPv4-mapped addresses unmapped.
func addrOf(hostPort string) netip.Addr {
	host, _, err := net.SplitHostPort(hostPort)
	if err != nil {
		return netip.Addr{}
	}
	a, _ := netip.ParseAddr(host)
	return a.Unmap()
}

// reset closes c with a reset rather than a FIN: a connection turned away
// leaves no socket in TIME_WAIT on the node, which a flood of thousands a
// second would fill its memory with for a minute.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	c.Close()
}

// connLimited is a listener that closes, before its TLS handshake, a
// connection from a source that opens them faster than its budget.
type connLimited struct {
	net.Listener
	conns budgets
}

// limitConns limits the connections l accepts per source.
func limitConns(l net.Listener) net.Listener { return &connLimited{Listener: l} }

func (l *connLimited) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.conns.allow(addrOf(c.RemoteAddr().String())) {
			return c, nil
		}
		reset(c)
	}
}
