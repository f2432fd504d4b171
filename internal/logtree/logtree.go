// Package logtree keeps the node's recent log in memory, one bounded ring
// per service, so that the owner can read and follow it over the node API
// after the console has scrolled away, and a Journal keeps a copy of the
// last boots on the data volume.
//
// A ring per service, not one for the whole node, is what Monogon's
// logtree does, and for the same reason: a chatty service (etcd, the
// kernel) must not push a quiet one's few lines out, and the lines that
// say why a node failed are usually from a quiet one. The tree is bounded
// by construction: services are named in code, each ring holds at most
// perService entries and maxBytes of text, and each entry at most MaxText
// bytes of text.
//
// Entries come from the node's slog handler (console.Handler's sink),
// etcd's zap logger through it, and the kernel's /dev/kmsg (package kmsg).
// Appending never blocks on a reader: a follower that falls behind loses
// its subscription (Subscription.Lagged) and must start again from the
// last entry it has, by Seq.
package logtree

import (
	"cmp"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"
)

// MaxText bounds an entry's text; longer text is cut and marked.
const MaxText = 4 << 10

// followBuffer is how many entries a follower may be behind before it
// loses its subscription.
const followBuffer = 4096

// Entry is one log line.
type Entry struct {
	// Seq orders entries across services; the tree assigns it, from 1.
	Seq       uint64        `json:"seq"`
	Time      time.Time     `json:"time"`
	SinceBoot time.Duration `json:"since_boot_ns"`
	Service   string        `json:"service"`
	Level     slog.Level    `json:"level"`
	Text      string        `json:"text"`
}

// Filter selects entries. The zero Filter selects all.
type Filter struct {
	// Service selects a service, those under it and those it ends:
	// "consensus" selects "consensus" and "consensus/etcd", and "etcd"
	// selects "consensus/etcd"; neither selects "consensuskey". Services
	// are named for where they run, and an owner asks for "etcd".
	Service string
	// Since selects entries logged at or after it.
	Since time.Time
	// AfterSeq selects entries after that sequence number.
	AfterSeq uint64
}

// Match reports whether f selects e.
func (f Filter) Match(e Entry) bool {
	return f.MatchService(e.Service) && (f.AfterSeq == 0 || e.Seq > f.AfterSeq) && !e.Time.Before(f.Since)
}

// MatchService reports whether f selects the entries of service.
func (f Filter) MatchService(service string) bool {
	return f.Service == "" || service == f.Service || strings.HasPrefix(service, f.Service+"/") ||
		strings.HasSuffix(service, "/"+f.Service)
}

// Tree is the in-memory log. Its zero value is not usable; use New.
type Tree struct {
	mu         sync.Mutex
	perService int
	maxBytes   int
	seq        uint64
	rings      map[string]*ring
	subs       map[*Subscription]struct{}
}

// New returns a tree keeping the last perService entries of each
// service, and of those at most maxBytes of text.
func New(perService, maxBytes int) *Tree {
	return &Tree{perService: perService, maxBytes: maxBytes, rings: map[string]*ring{}, subs: map[*Subscription]struct{}{}}
}

// Append adds e (its Seq is assigned) and hands it to the followers.
func (t *Tree) Append(e Entry) {
	if len(e.Text) > MaxText {
		e.Text = e.Text[:MaxText] + " [cut]"
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.seq++
	e.Seq = t.seq
	r := t.rings[e.Service]
	if r == nil {
		r = &ring{}
		t.rings[e.Service] = r
	}
	r.add(e, t.perService, t.maxBytes)
	for s := range t.subs {
		if !s.filter.Match(e) {
			continue
		}
		select {
		case s.c <- e:
		default:
			s.lagged = true
			t.drop(s)
		}
	}
}

// Read returns the entries f selects, oldest first.
func (t *Tree) Read(f Filter) []Entry {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.read(f)
}

func (t *Tree) read(f Filter) []Entry {
	var out []Entry
	for _, r := range t.rings {
		for _, e := range r.ordered() {
			if f.Match(e) {
				out = append(out, e)
			}
		}
	}
	slices.SortFunc(out, func(a, b Entry) int { return cmp.Compare(a.Seq, b.Seq) })
	return out
}

// Services returns the names of the services that logged, sorted.
func (t *Tree) Services() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	names := make([]string, 0, len(t.rings))
	for name := range t.rings {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// Subscription is a follower's view: the entries up to when it began,
// then every new one on C.
type Subscription struct {
	// Backlog holds the entries the filter selected when the
	// subscription began; C gets the ones after them.
	Backlog []Entry
	C       <-chan Entry
	c       chan Entry
	filter  Filter
	tree    *Tree
	lagged  bool
}

// Follow subscribes to the entries f selects. Close the subscription
// when done.
func (t *Tree) Follow(f Filter) *Subscription {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := make(chan Entry, followBuffer)
	s := &Subscription{Backlog: t.read(f), C: c, c: c, filter: f, tree: t}
	t.subs[s] = struct{}{}
	return s
}

// Close ends the subscription and closes C.
func (s *Subscription) Close() {
	s.tree.mu.Lock()
	defer s.tree.mu.Unlock()
	s.tree.drop(s)
}

// Waiting returns the entries already waiting on C, without blocking.
func (s *Subscription) Waiting() []Entry {
	var out []Entry
	for {
		select {
		case e, ok := <-s.C:
			if !ok {
				return out
			}
			out = append(out, e)
		default:
			return out
		}
	}
}

// Lagged reports whether C was closed because the follower fell behind
// by more than it could buffer.
func (s *Subscription) Lagged() bool {
	s.tree.mu.Lock()
	defer s.tree.mu.Unlock()
	return s.lagged
}

func (t *Tree) drop(s *Subscription) {
	if _, ok := t.subs[s]; ok {
		delete(t.subs, s)
		close(s.c)
	}
}

// ring is one service's last entries, oldest first.
type ring struct {
	entries []Entry
	bytes   int
}

// add appends e and drops the oldest entries beyond size entries or
// maxBytes of text (keeping e itself).
func (r *ring) add(e Entry, size, maxBytes int) {
	r.entries = append(r.entries, e)
	r.bytes += len(e.Text)
	drop := 0
	for n := len(r.entries); n-drop > size || (r.bytes > maxBytes && n-drop > 1); drop++ {
		r.bytes -= len(r.entries[drop].Text)
	}
	if drop == 0 {
		return
	}
	r.entries = r.entries[drop:]
	if cap(r.entries) > 2*size {
		r.entries = slices.Clone(r.entries)
	}
}

func (r *ring) ordered() []Entry { return r.entries }
