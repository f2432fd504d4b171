package nodeapi

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/borough-os/borough/internal/authority"
	"github.com/borough-os/borough/internal/logtree"
	"github.com/borough-os/borough/internal/metrics"
	"github.com/borough-os/borough/internal/pki"
	"github.com/borough-os/borough/internal/ticket"
	"github.com/borough-os/borough/proto/nodepb"
)

// node is a node API on loopback with a cluster identity of its own CA.
type node struct {
	addr    string
	ca      *pki.CA
	owner   tls.Certificate
	tree    *logtree.Tree
	powered chan nodepb.PowerRequest_Action
	// ownerless makes the node know no owner, as a joined node before its
	// data volume is mounted.
	ownerless atomic.Bool
	// unconfirmed makes the node not yet trust its owner, as an
	// established node before its data volume confirms its ESP's record.
	unconfirmed atomic.Bool
	// forged makes the node present a certificate of its CA in its name
	// with another key, as a member that holds the CA's key could, with
	// the node's admission; unadmitted makes it show no admission.
	forged, unadmitted atomic.Bool
	// handedOver makes the node's owner another, as after a hand-over.
	handedOver atomic.Bool
	// accepted counts the connections the node accepted.
	accepted atomic.Int32
}

// countingListener counts the connections it accepts.
type countingListener struct {
	net.Listener
	n *atomic.Int32
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// admission is the owner's admission of cert's key as node name.
func admission(t testing.TB, owner *pki.Cert, name string, cert *pki.Cert) []byte {
	t.Helper()
	tk, statement, err := ticket.Founder("test", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	signed, err := authority.Sign(owner.Cert, owner.Key, authority.KindTicket, statement)
	if err != nil {
		t.Fatal(err)
	}
	a, err := ticket.NewAdmission(signed, ticket.Prove(tk, name, pki.KeyHash(cert.Cert)))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func keyPair(c *pki.Cert) tls.Certificate {
	return tls.Certificate{Certificate: [][]byte{c.Cert.Raw}, PrivateKey: c.Key, Leaf: c.Cert}
}

func startNode(t testing.TB, identity bool) *node {
	t.Helper()
	now := time.Now()
	ca, err := pki.NewCA("test", now)
	if err != nil {
		t.Fatal(err)
	}
	owner, err := pki.NewOwner("owner", now)
	if err != nil {
		t.Fatal(err)
	}
	next, err := pki.NewOwner("next owner", now)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ca.Issue("node-1", []net.IP{net.IPv4(127, 0, 0, 1)}, nil, now)
	if err != nil {
		t.Fatal(err)
	}
	forged, err := ca.Issue("node-1", []net.IP{net.IPv4(127, 0, 0, 1)}, nil, now)
	if err != nil {
		t.Fatal(err)
	}
	n := &node{ca: ca, owner: keyPair(owner), tree: logtree.New(100, 1<<20), powered: make(chan nodepb.PowerRequest_Action, 1)}
	kp, forgedKP := keyPair(cert), keyPair(forged)
	kp.Certificate = append(kp.Certificate, ca.Cert.Raw)
	admitted := admission(t, owner, "node-1", cert)
	s := &Server{
		Owner: func() *x509.Certificate {
			if n.ownerless.Load() {
				return nil
			}
			if n.handedOver.Load() {
				return next.Cert
			}
			return owner.Cert
		},
		Identity: func() (*tls.Certificate, error) {
			switch {
			case !identity:
				return nil, net.ErrClosed
			case n.forged.Load():
				return &forgedKP, nil
			}
			return &kp, nil
		},
		Admission: func() []byte {
			if n.unadmitted.Load() {
				return nil
			}
			return admitted
		},
		Logs:  n.tree,
		Info:  func() *nodepb.Info { return &nodepb.Info{State: "Running", Version: "v1"} },
		Power: func(a nodepb.PowerRequest_Action) { n.powered <- a },
		Update: func(req *nodepb.UpdateRequest) (*nodepb.UpdateResponse, error) {
			if len(req.GetRelease()) == 0 {
				return nil, errors.New("the update is not signed")
			}
			return &nodepb.UpdateResponse{Slot: "B", Version: strconv.Itoa(len(req.GetBootBinary()))}, nil
		},
		Unconfirmed: func() error {
			if n.unconfirmed.Load() {
				return errors.New("its data volume is still locked")
			}
			return nil
		},
		Log: slog.New(slog.DiscardHandler),
	}
	s.Metrics = metrics.Handler(s.Info)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n.addr = l.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, countingListener{l, &n.accepted}) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return n
}

func (n *node) client(kp tls.Certificate) *Client {
	return &Client{Addr: n.addr, Owner: kp, CA: n.ca.Cert}
}

// TestOneConnection checks that a client's calls share one connection, so
// that a dashboard polling a node shakes hands once.
func TestOneConnection(t *testing.T) {
	n := startNode(t, true)
	c := n.client(n.owner)
	for range 3 {
		if _, err := c.Info(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if got := n.accepted.Load(); got != 1 {
		t.Errorf("three calls made %d connections, want 1", got)
	}
}

func TestAccess(t *testing.T) {
	stranger, _ := pki.NewOwner("owner", time.Now())
	otherCA, _ := pki.NewCA("test", time.Now())
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		identity bool
		client   func(n *node) *Client
		err      string
	}{
		{"the owner, node verified", true, func(n *node) *Client { return n.client(n.owner) }, ""},
		{"a stranger with the owner's name", true, func(n *node) *Client { return n.client(keyPair(stranger)) }, "certificate"},
		{"no certificate", true, func(n *node) *Client { return n.client(tls.Certificate{}) }, "certificate"},
		{"a node of another CA", true, func(n *node) *Client {
			c := n.client(n.owner)
			c.CA = otherCA.Cert
			return c
		}, "certificate signed by unknown authority"},
		{"a node without a cluster, verified", false, func(n *node) *Client { return n.client(n.owner) }, "failed to verify certificate"},
		{"a node without a cluster, unverified", false, func(n *node) *Client {
			return &Client{Addr: n.addr, Owner: n.owner, Unverified: true}
		}, ""},
		{"the owner, of a node that knows no owner yet", true, func(n *node) *Client {
			n.ownerless.Store(true)
			return n.client(n.owner)
		}, "certificate"},
		{"a certificate in the node's name the owner did not admit", true, func(n *node) *Client {
			n.forged.Store(true)
			return n.client(n.owner)
		}, "refusing node node-1, whose certificate the owner did not admit"},
		{"a node that shows no admission", true, func(n *node) *Client {
			n.unadmitted.Store(true)
			return n.client(n.owner)
		}, "node node-1 has no admission"},
		{"a certificate the owner did not admit, unverified", true, func(n *node) *Client {
			n.forged.Store(true)
			return &Client{Addr: n.addr, Owner: n.owner, Unverified: true}
		}, ""},
		{"neither CA nor unverified", true, func(n *node) *Client { return &Client{Addr: n.addr, Owner: n.owner} }, "needs the cluster CA"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := startNode(t, tc.identity)
			info, err := tc.client(n).Info(ctx)
			if tc.err == "" {
				if err != nil || info.GetState() != "Running" {
					t.Fatalf("Info = %v, %v", info, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("Info = %v, want an error with %q", err, tc.err)
			}
		})
	}
}

func TestLogs(t *testing.T) {
	n := startNode(t, true)
	c := n.client(n.owner)
	n.tree.Append(logtree.Entry{Time: time.Now(), Service: "storage", Text: "data volume unlocked"})
	n.tree.Append(logtree.Entry{Time: time.Now(), Service: "cluster/etcd", Text: "ready"})
	for _, tc := range []struct {
		name string
		req  *nodepb.LogsRequest
		want string
		err  string
	}{
		{"all", &nodepb.LogsRequest{}, "data volume unlocked,ready", ""},
		{"one service", &nodepb.LogsRequest{Service: "cluster"}, "ready", ""},
		{"since later", &nodepb.LogsRequest{SinceUnixNano: time.Now().Add(time.Hour).UnixNano()}, "", ""},
		{"a service that never logged", &nodepb.LogsRequest{Service: "etc"}, "", `no service "etc" has logged; these have: cluster/etcd, storage`},
		{"an earlier boot, no journal", &nodepb.LogsRequest{Boot: -1}, "", "no log of earlier boots"},
		{"follow an earlier boot", &nodepb.LogsRequest{Boot: -1, Follow: true}, "", "only the current boot"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			err := c.Logs(context.Background(), tc.req, func(e *nodepb.LogEntry) { got = append(got, e.GetText()) })
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Logs = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || strings.Join(got, ",") != tc.want {
				t.Errorf("Logs = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestFollow(t *testing.T) {
	n := startNode(t, true)
	n.tree.Append(logtree.Entry{Time: time.Now(), Service: "node", Text: "before"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan string, 10)
	done := make(chan error, 1)
	go func() {
		done <- n.client(n.owner).Logs(ctx, &nodepb.LogsRequest{Follow: true, Service: "node"},
			func(e *nodepb.LogEntry) { got <- e.GetText() })
	}()
	if s := <-got; s != "before" {
		t.Errorf("first followed line %q", s)
	}
	n.tree.Append(logtree.Entry{Time: time.Now(), Service: "etcd", Text: "not followed"})
	n.tree.Append(logtree.Entry{Time: time.Now(), Service: "node", Text: "after"})
	select {
	case s := <-got:
		if s != "after" {
			t.Errorf("followed %q, want after", s)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a new line did not reach the follower")
	}
	cancel()
	if err := <-done; err == nil {
		t.Error("a cancelled follow returned nil")
	}
}

func TestPower(t *testing.T) {
	n := startNode(t, true)
	c := n.client(n.owner)
	if err := c.Power(context.Background(), nodepb.PowerRequest_ACTION_REBOOT); err != nil {
		t.Fatal(err)
	}
	if a := <-n.powered; a != nodepb.PowerRequest_ACTION_REBOOT {
		t.Errorf("powered %v", a)
	}
	err := c.Power(context.Background(), nodepb.PowerRequest_ACTION_UNSPECIFIED)
	if err == nil || !strings.Contains(err.Error(), "want reboot or power-off") {
		t.Errorf("an unspecified action: %v", err)
	}
	select {
	case a := <-n.powered:
		t.Errorf("an unspecified action powered %v", a)
	default:
	}
}

func TestUpdate(t *testing.T) {
	n := startNode(t, true)
	c := n.client(n.owner)
	_, err := c.Update(context.Background(), &nodepb.UpdateRequest{BootBinary: []byte("1")})
	if err == nil || !strings.Contains(err.Error(), "the update is not signed") {
		t.Errorf("a refused update: %v", err)
	}
	select {
	case a := <-n.powered:
		t.Fatalf("a refused update powered %v", a)
	default:
	}
	big := strings.Repeat("x", 8<<20)
	resp, err := c.Update(context.Background(), &nodepb.UpdateRequest{BootBinary: []byte(big), Release: []byte("signed")})
	if err != nil || resp.GetSlot() != "B" || resp.GetVersion() != strconv.Itoa(len(big)) {
		t.Fatalf("Update = %v, %v", resp.GetSlot(), err)
	}
	if a := <-n.powered; a != nodepb.PowerRequest_ACTION_REBOOT {
		t.Errorf("an installed update powered %v, want a reboot", a)
	}
}

// TestUnconfirmed: before the node trusts its owner, the owner (or whoever
// forged the ESP's record) reads what it says and nothing more: power and
// updates are refused with the reason, and allowed once it does.
func TestUnconfirmed(t *testing.T) {
	ctx := context.Background()
	update := &nodepb.UpdateRequest{BootBinary: []byte("efi"), Release: []byte("signed")}
	for _, tc := range []struct {
		name string
		call func(c *Client) error
		acts bool
	}{
		{"info", func(c *Client) error { _, err := c.Info(ctx); return err }, false},
		{"logs", func(c *Client) error { return c.Logs(ctx, &nodepb.LogsRequest{}, func(*nodepb.LogEntry) {}) }, false},
		{"power", func(c *Client) error { return c.Power(ctx, nodepb.PowerRequest_ACTION_REBOOT) }, true},
		{"update", func(c *Client) error { _, err := c.Update(ctx, update); return err }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := startNode(t, true)
			c := n.client(n.owner)
			n.unconfirmed.Store(true)
			err := tc.call(c)
			if refused := err != nil; refused != tc.acts {
				t.Fatalf("%s before the node trusts its owner: %v; want refused: %v", tc.name, err, tc.acts)
			}
			if tc.acts && !strings.Contains(err.Error(), "refused until the node trusts its owner: its data volume is still locked") {
				t.Errorf("%s refused with %q, want the reason", tc.name, err)
			}
			n.unconfirmed.Store(false)
			if err := tc.call(c); err != nil {
				t.Errorf("%s once the node trusts its owner: %v", tc.name, err)
			}
		})
	}
}
