package unlock

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/borough-os/borough/internal/authority"
	"github.com/borough-os/borough/internal/escrow"
	"github.com/borough-os/borough/internal/pki"
	"github.com/borough-os/borough/proto/authoritypb"
)

var now = time.Now()

// node is a cluster member with its identity and escrow key.
type node struct {
	name      string
	cert      *pki.Cert
	escrowKey []byte
	pub       []byte
	addr      string
}

// noCRL stands for a holder whose copy of the CRL does not verify.
var noCRL = &x509.RevocationList{}

// identity is n's identity with crl in force: the CA's first, empty one
// if nil, none if noCRL.
func (n *node) identity(ca *pki.CA, crl *x509.RevocationList) Identity {
	id := Identity{Cert: tls.Certificate{Certificate: [][]byte{n.cert.Cert.Raw}, PrivateKey: n.cert.Key}, CA: ca.Cert}
	switch crl {
	case noCRL:
		id.CRL = func() (*x509.RevocationList, error) { return nil, errors.New("the copy on the ESP does not verify") }
		return id
	case nil:
		der, err := ca.CRL(1, nil, now)
		if err == nil {
			crl, err = x509.ParseRevocationList(der)
		}
		if err != nil {
			panic(err)
		}
	}
	id.CRL = func() (*x509.RevocationList, error) { return crl, nil }
	return id
}

// testCluster is a CA and nodes node-00000001 to node-0000000N.
type testCluster struct {
	ca    *pki.CA
	nodes []*node
}

func newCluster(t *testing.T, n int) *testCluster {
	t.Helper()
	ca, err := pki.NewCA("prod", now)
	if err != nil {
		t.Fatal(err)
	}
	c := &testCluster{ca: ca}
	for i := range n {
		c.nodes = append(c.nodes, c.newNode(t, ca, i+1))
	}
	return c
}

func (c *testCluster) newNode(t *testing.T, ca *pki.CA, i int) *node {
	t.Helper()
	name := fmt.Sprintf("node-%08x", i)
	cert, err := ca.Issue(name, []net.IP{net.IPv4(127, 0, 0, 1)}, []string{name}, now)
	if err != nil {
		t.Fatal(err)
	}
	priv, pub, err := escrow.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	return &node{name: name, cert: cert, escrowKey: priv, pub: pub}
}

// serve runs n's responder on loopback, with crl in force, until the
// test ends, and returns the log of its releases and refusals.
func (c *testCluster) serve(t *testing.T, n *node, crl *x509.RevocationList) *bytes.Buffer {
	t.Helper()
	return c.serveAt(t, n, crl, "127.0.0.1:0")
}

// serveAt is serve on the address addr.
func (c *testCluster) serveAt(t *testing.T, n *node, crl *x509.RevocationList, addr string) *bytes.Buffer {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	return c.serveOn(t, n, crl, l)
}

// serveOn is serve on the listener l.
func (c *testCluster) serveOn(t *testing.T, n *node, crl *x509.RevocationList, l net.Listener) *bytes.Buffer {
	t.Helper()
	n.addr = l.Addr().String()
	log := &syncBuffer{}
	s := &Server{Cluster: "prod", Node: n.name, EscrowKey: n.escrowKey, Identity: n.identity(c.ca, crl),
		Log: slog.New(slog.NewTextHandler(log, nil))}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Serve(ctx, l); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return &log.b
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// escrowFor splits cuk of node n among the others, k of which unlock.
func (c *testCluster) escrowFor(t *testing.T, n *node, cuk []byte, k int) (*escrow.Escrow, map[string]string) {
	t.Helper()
	var holders []escrow.Holder
	addrs := make(map[string]string)
	for _, m := range c.nodes {
		if m != n {
			holders = append(holders, escrow.Holder{Name: m.name, Key: m.pub})
			addrs[m.name] = m.addr
		}
	}
	b := escrow.Binding{Cluster: "prod", Node: n.name, Epoch: 1, Key: pki.KeyHash(n.cert.Cert)}
	e, err := escrow.Split(cuk, b, k, holders)
	if err != nil {
		t.Fatal(err)
	}
	return e, addrs
}

var cuk = bytes.Repeat([]byte{0x3c}, 32)

func fetch(t *testing.T, id Identity, e *escrow.Escrow, addrs map[string]string, timeout time.Duration) ([]byte, string, error) {
	t.Helper()
	var log bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	got, err := Fetch(ctx, slog.New(slog.NewTextHandler(&log, nil)), id, e, addrs)
	return got, log.String(), err
}

// TestFetch unlocks a node of three and of five voters through real
// responders on loopback.
func TestFetch(t *testing.T) {
	for _, voters := range []int{3, 5} {
		t.Run(fmt.Sprint(voters, " voters"), func(t *testing.T) {
			c := newCluster(t, voters)
			logs := make(map[string]*bytes.Buffer)
			for _, n := range c.nodes[1:] {
				logs[n.name] = c.serve(t, n, nil)
			}
			a := c.nodes[0]
			e, addrs := c.escrowFor(t, a, cuk, escrow.Threshold(voters))
			got, _, err := fetch(t, a.identity(c.ca, nil), e, addrs, 30*time.Second)
			if err != nil || !bytes.Equal(got, cuk) {
				t.Fatalf("Fetch = %x, %v; want the CUK", got, err)
			}
			released := 0
			for _, l := range logs {
				if strings.Contains(l.String(), "released a share") && strings.Contains(l.String(), "node="+a.name) {
					released++
				}
			}
			if released < e.K {
				t.Errorf("%d holders logged a release, want at least %d", released, e.K)
			}
		})
	}
}

// TestFetchPassesOverASlowHolder unlocks a node one share of which is
// enough while another holder takes seconds to answer: the key is
// recovered from the quick one's share without waiting for the slow one,
// which has released nothing when Fetch returns.
func TestFetchPassesOverASlowHolder(t *testing.T) {
	c := newCluster(t, 3)
	c.serve(t, c.nodes[1], nil)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	slow := c.serveOn(t, c.nodes[2], nil, slowListener{l})
	a := c.nodes[0]
	e, addrs := c.escrowFor(t, a, cuk, 1)
	got, _, err := fetch(t, a.identity(c.ca, nil), e, addrs, 30*time.Second)
	if err != nil || !bytes.Equal(got, cuk) {
		t.Fatalf("Fetch = %x, %v; want the CUK", got, err)
	}
	if log := slow.String(); strings.Contains(log, "released a share") {
		t.Errorf("Fetch returned after the slow holder answered:\n%s", log)
	}
}

// slowListener accepts each connection 3 s after it came.
type slowListener struct{ net.Listener }

func (l slowListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		time.Sleep(3 * time.Second)
	}
	return c, err
}

// TestFetchHoldersUpLate unlocks a node whose holders come up after it
// first asked them, as in a cold restart of the whole cluster.
func TestFetchHoldersUpLate(t *testing.T) {
	c := newCluster(t, 3)
	a := c.nodes[0]
	var addrs []string
	for _, n := range c.nodes[1:] {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		n.addr = l.Addr().String()
		addrs = append(addrs, n.addr)
		l.Close()
	}
	e, holders := c.escrowFor(t, a, cuk, 2)
	type result struct {
		cuk []byte
		log string
		err error
	}
	done := make(chan result, 1)
	go func() {
		got, log, err := fetch(t, a.identity(c.ca, nil), e, holders, 30*time.Second)
		done <- result{got, log, err}
	}()
	time.Sleep(3 * unreachableRetry)
	for i, n := range c.nodes[1:] {
		c.serveAt(t, n, nil, addrs[i])
	}
	r := <-done
	if r.err != nil || !bytes.Equal(r.cuk, cuk) {
		t.Fatalf("Fetch = %x, %v; want the CUK", r.cuk, r.err)
	}
	if !strings.Contains(r.log, "waiting for unlock: 0 of 2 shares") || !strings.Contains(r.log, "connection refused") {
		t.Errorf("the requester did not say it waited for holders that were down:\n%s", r.log)
	}
}

// TestFetchUnbound unlocks a node whose escrow was split before escrows
// were bound to the node's key, and its holders say so.
func TestFetchUnbound(t *testing.T) {
	c := newCluster(t, 3)
	var logs []*bytes.Buffer
	for _, n := range c.nodes[1:] {
		logs = append(logs, c.serve(t, n, nil))
	}
	a := c.nodes[0]
	e, addrs := c.escrowFor(t, a, cuk, 1)
	e.Binding.Key = nil
	e, err := escrow.Split(cuk, e.Binding, 1, []escrow.Holder{{Name: c.nodes[1].name, Key: c.nodes[1].pub}, {Name: c.nodes[2].name, Key: c.nodes[2].pub}})
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := fetch(t, a.identity(c.ca, nil), e, addrs, 30*time.Second)
	if err != nil || !bytes.Equal(got, cuk) {
		t.Fatalf("Fetch = %x, %v; want the CUK", got, err)
	}
	warned := false
	for _, l := range logs {
		warned = warned || strings.Contains(l.String(), "answering for an escrow bound to no key")
	}
	if !warned {
		t.Error("no holder warned of an escrow bound to no key")
	}
}

// TestFetchRefused plays what the responders must refuse: they all fail
// to unlock within the time given, the requester says it is waiting, and
// the holders say why they refused.
func TestFetchRefused(t *testing.T) {
	c := newCluster(t, 4)
	a, b, d := c.nodes[0], c.nodes[1], c.nodes[3]
	revoked, err := c.ca.CRL(2, []*big.Int{a.cert.Cert.SerialNumber}, now)
	if err != nil {
		t.Fatal(err)
	}
	crl, err := x509.ParseRevocationList(revoked)
	if err != nil {
		t.Fatal(err)
	}
	removedA := ownersCRL(t, c.ca, a)
	stranger, err := pki.NewCA("prod", now)
	if err != nil {
		t.Fatal(err)
	}
	// logs are the logs of the responders the current case started.
	var logs []*bytes.Buffer
	for _, tc := range []struct {
		name string
		// setup starts responders and returns the requester's identity,
		// its escrow and the holders' addresses.
		setup func(t *testing.T) (Identity, *escrow.Escrow, map[string]string)
		// refusal is what a holder logs, if it gets that far.
		refusal string
	}{
		{"requester revoked", func(t *testing.T) (Identity, *escrow.Escrow, map[string]string) {
			for _, n := range c.nodes[1:] {
				logs = append(logs, c.serve(t, n, crl))
			}
			e, addrs := c.escrowFor(t, a, cuk, 2)
			return a.identity(c.ca, nil), e, addrs
		}, "the certificate of " + a.name + " is revoked"},
		{"requester removed, with a new certificate for its key", func(t *testing.T) (Identity, *escrow.Escrow, map[string]string) {
			for _, n := range c.nodes[1:] {
				logs = append(logs, c.serve(t, n, removedA))
			}
			e, addrs := c.escrowFor(t, a, cuk, 2)
			// A member holds the CA key and signs the removed node a
			// certificate the CRL does not list.
			csr, err := pki.NewCSR(a.name, []net.IP{net.IPv4(127, 0, 0, 1)}, a.cert.Key)
			if err != nil {
				t.Fatal(err)
			}
			fresh, err := c.ca.SignCSR(csr, netip.MustParseAddr("127.0.0.1"), now)
			if err != nil {
				t.Fatal(err)
			}
			again := &node{name: a.name, cert: &pki.Cert{Cert: fresh, Key: a.cert.Key}}
			return again.identity(c.ca, nil), e, addrs
		}, "the owner removed node " + a.name},
		{"holders without a verified CRL", func(t *testing.T) (Identity, *escrow.Escrow, map[string]string) {
			for _, n := range c.nodes[1:] {
				logs = append(logs, c.serve(t, n, noCRL))
			}
			e, addrs := c.escrowFor(t, a, cuk, 2)
			return a.identity(c.ca, nil), e, addrs
		}, "this holder cannot check " + a.name + ": the copy on the ESP does not verify"},
		{"another node's shares", func(t *testing.T) (Identity, *escrow.Escrow, map[string]string) {
			for _, n := range c.nodes[1:] {
				logs = append(logs, c.serve(t, n, nil))
			}
			e, addrs := c.escrowFor(t, a, cuk, 2)
			return d.identity(c.ca, nil), e, addrs
		}, "requester=" + d.name + " node=" + a.name},
		{"a certificate of another key in the node's name", func(t *testing.T) (Identity, *escrow.Escrow, map[string]string) {
			for _, n := range c.nodes[1:] {
				logs = append(logs, c.serve(t, n, nil))
			}
			e, addrs := c.escrowFor(t, a, cuk, 2)
			// Any member holds the CA key and can sign one.
			posing := c.newNode(t, c.ca, 1)
			return posing.identity(c.ca, nil), e, addrs
		}, "is not of the key " + a.name + " escrowed its unlock key under"},
		{"an escrow bound to another key", func(t *testing.T) (Identity, *escrow.Escrow, map[string]string) {
			for _, n := range c.nodes[1:] {
				logs = append(logs, c.serve(t, n, nil))
			}
			e, addrs := c.escrowFor(t, a, cuk, 2)
			e.Binding.Key = pki.KeyHash(b.cert.Cert)
			return a.identity(c.ca, nil), e, addrs
		}, "is not of the key " + a.name + " escrowed its unlock key under"},
		{"another cluster's CA", func(t *testing.T) (Identity, *escrow.Escrow, map[string]string) {
			for _, n := range c.nodes[1:] {
				c.serve(t, n, nil)
			}
			e, addrs := c.escrowFor(t, a, cuk, 2)
			fake := c.newNode(t, stranger, 1)
			return fake.identity(stranger, nil), e, addrs
		}, ""},
		{"a holder's address answered by another", func(t *testing.T) (Identity, *escrow.Escrow, map[string]string) {
			for _, n := range c.nodes[1:] {
				c.serve(t, n, nil)
			}
			e, addrs := c.escrowFor(t, a, cuk, 2)
			for name := range addrs {
				addrs[name] = b.addr
			}
			return a.identity(c.ca, nil), e, addrs
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logs = nil
			id, e, addrs := tc.setup(t)
			got, log, err := fetch(t, id, e, addrs, 3*time.Second)
			if err == nil || got != nil {
				t.Fatalf("Fetch = %x, %v; want it to wait in vain", got, err)
			}
			if !strings.Contains(log, "waiting for unlock: ") || !strings.Contains(err.Error(), "of 2 shares") {
				t.Errorf("Fetch said %q, %v; want it waiting for shares", log, err)
			}
			if tc.refusal == "" {
				return
			}
			for _, l := range logs {
				if s := l.String(); !strings.Contains(s, "refused a share request") || !strings.Contains(s, tc.refusal) {
					t.Errorf("a holder logged %q, want a refusal saying %s", s, tc.refusal)
				}
			}
		})
	}
}

// ownersCRL is CRL number 2 of ca revoking n's certificate, carrying the
// owner's revocations that remove n.
func ownersCRL(t *testing.T, ca *pki.CA, n *node) *x509.RevocationList {
	t.Helper()
	owner, err := pki.NewOwner("owner", now)
	if err != nil {
		t.Fatal(err)
	}
	serials := []*big.Int{n.cert.Cert.SerialNumber}
	der, err := authority.RevocationsCRL(ca, 2, serials, owner.Cert, owner.Key,
		&authoritypb.Revocations{Cluster: "prod", Number: 2, Nodes: []string{n.name}, Serials: pki.Hex(serials)}, now)
	if err != nil {
		t.Fatal(err)
	}
	crl, err := x509.ParseRevocationList(der)
	if err != nil {
		t.Fatal(err)
	}
	return crl
}
