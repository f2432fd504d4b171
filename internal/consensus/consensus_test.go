package consensus

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/borough-os/borough/internal/authority"
	"github.com/borough-os/borough/internal/console"
	"github.com/borough-os/borough/internal/keyspace"
	"github.com/borough-os/borough/internal/pki"
	"github.com/borough-os/borough/internal/poll"
	"github.com/borough-os/borough/internal/ports"
	"github.com/borough-os/borough/proto/authoritypb"
)

// TestConsensus runs a real one-member etcd on loopback: the in-process
// client works, the TLS client port takes the owner's certificate and
// refuses a node's of the cluster CA and a stranger's, and the CRL watcher
// writes what is put in etcd once it has checked it.
func TestConsensus(t *testing.T) {
	tc := newTestCA(t)
	ca, owner, crl, now := tc.ca, tc.owner, tc.crl, tc.now
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := tc.member("n1", "127.0.0.9", ModeNew)
	files := cfg.PKI
	c, _, _ := run(t, ctx, cfg)

	if _, err := c.Client.Put(ctx, "k", "v"); err != nil {
		t.Fatalf("put through the in-process client: %v", err)
	}
	if c.ClusterID() == 0 || c.MemberID() == 0 {
		t.Error("no cluster or member ID")
	}

	// clientTLS trusts the cluster CA and presents cert, if any.
	clientTLS := func(cert *pki.Cert) *tls.Config {
		roots := x509.NewCertPool()
		roots.AddCert(ca.Cert)
		cfg := &tls.Config{RootCAs: roots}
		if cert != nil {
			cfg.Certificates = []tls.Certificate{{Certificate: [][]byte{cert.Cert.Raw}, PrivateKey: cert.Key}}
		}
		return cfg
	}
	remote := func(cert *pki.Cert) error {
		cl, err := clientv3.New(clientv3.Config{Endpoints: []string{"https://127.0.0.9:2379"}, TLS: clientTLS(cert), DialTimeout: 5 * time.Second})
		if err != nil {
			return err
		}
		defer cl.Close()
		rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
		defer rcancel()
		_, err = cl.Get(rctx, "k")
		return err
	}
	member, _ := ca.Issue("client", nil, nil, now)
	other, _ := pki.NewCA("other", now)
	stranger, _ := other.Issue("stranger", nil, nil, now)
	for _, tc := range []struct {
		name string
		cert *pki.Cert
		ok   bool
	}{{"owner", owner, true}, {"cluster CA", member, false}, {"other CA", stranger, false}, {"none", nil, false}} {
		if err := remote(tc.cert); (err == nil) != tc.ok {
			t.Errorf("remote client with %s certificate: err = %v, want ok %v", tc.name, err, tc.ok)
		}
	}

	// etcd's HTTP health check is served on ports.EtcdHTTP, on the member's
	// listening address (the loopback on a node), without the HTTP/JSON
	// API, which is the client port's (jsonapi_test.go) beside gRPC.
	web := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: clientTLS(owner)}}
	httpURL := "https://" + net.JoinHostPort("127.0.0.9", strconv.Itoa(ports.EtcdHTTP))
	for _, req := range []struct {
		method, url string
		want        int
	}{
		{"GET", httpURL + "/health", http.StatusOK},
		{"POST", httpURL + "/v3/kv/range", http.StatusNotFound},
		{"GET", "https://127.0.0.9:2379/health", http.StatusOK},
	} {
		r, _ := http.NewRequestWithContext(ctx, req.method, req.url, strings.NewReader(`{"key":"aw=="}`))
		resp, err := web.Do(r)
		if err != nil {
			t.Fatalf("%s %s: %v", req.method, req.url, err)
		}
		resp.Body.Close()
		if resp.StatusCode != req.want {
			t.Errorf("%s %s: status %d, want %d", req.method, req.url, resp.StatusCode, req.want)
		}
	}

	// A CRL the CA did not sign, garbage, an older CRL, and a newer one
	// without the owner's revocations (a member holds the CA's key), with
	// the owner's revocations of another number or a stranger's are
	// refused and leave the file as it was; then a newer one with the
	// owner's revocations is put in force, and one after it that takes a
	// revocation back, though the owner signed it, is refused.
	impostor, _ := pki.NewOwner("owner", now)
	otherCRL, _ := other.CRL(5, []*big.Int{member.Cert.SerialNumber}, now)
	unsigned, _ := ca.CRL(2, []*big.Int{stranger.Cert.SerialNumber}, now)
	renumbered := ownersCRL(t, ca, owner, 3, 2, stranger.Cert.SerialNumber)
	impostors := ownersCRL(t, ca, impostor, 2, 2, member.Cert.SerialNumber)
	good := ownersCRL(t, ca, owner, 2, 2, stranger.Cert.SerialNumber)
	takeBack := ownersCRL(t, ca, owner, 3, 3)
	for _, der := range [][]byte{otherCRL, []byte("garbage"), crl, unsigned, renumbered, impostors, good, takeBack} {
		if _, err := c.Client.Put(ctx, keyspace.CRL, string(der)); err != nil {
			t.Fatal(err)
		}
	}
	for _, refused := range []string{"not issued by the cluster CA", "not a DER revocation list",
		"the CRL number 2 changes what is revoked, and carries no revocations of the owner's",
		"the CRL is number 3, the owner's revocations number 2", "not signed by this node's owner",
		"the CRL number 3 takes back the revocation of [" + stranger.Cert.SerialNumber.Text(16) + "]"} {
		if poll.Until(t.Context(), 10*time.Second, 50*time.Millisecond, poll.True(func() bool { return strings.Contains(tc.logs.String(), refused) })) != nil {
			t.Fatalf("the log does not say a CRL was refused as %q", refused)
		}
	}
	if b, _ := os.ReadFile(files.CRL()); !bytes.Equal(b, good) {
		t.Error("the CRL in force is not the owner's newest that took nothing back")
	}
}

// TestLeaderConfirms runs a voter and a learner, then stops the voter:
// the learner, which never campaigns, still names its leader, and only
// leaderConfirms (Led's check for a learner) says the leader is gone.
func TestLeaderConfirms(t *testing.T) {
	tc := newTestCA(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, learner, _, stopLeader := tc.voterAndLearner(ctx, "127.0.0.13", "127.0.0.14")
	confirms := func() error {
		ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		return learner.leaderConfirms(ctx)
	}
	if err := confirms(); err != nil || !learner.HasLeader() {
		t.Fatalf("the learner beside its running leader: has a leader %v, confirmed: %v", learner.HasLeader(), err)
	}
	if !learner.Led(ctx, 3*time.Second) {
		t.Fatal("the learner beside its running leader is not led")
	}
	stopLeader()
	awaitTrue(t, time.Minute, "the learner's leader to stop confirming", func() bool { return confirms() != nil })
	if err := confirms(); err == nil || !learner.HasLeader() {
		t.Fatalf("the learner after its leader stopped: has a leader %v, confirmed: %v; want a leader named but not confirming", learner.HasLeader(), err)
	}
	if learner.Led(ctx, 3*time.Second) {
		t.Fatal("the learner after its leader stopped is led")
	}
}

func TestPromotable(t *testing.T) {
	voter := func(n string) Member { return Member{ID: 1, Name: n} }
	learner := func(n string) Member { return Member{ID: 2, Name: n, Learner: true} }
	for _, tc := range []struct {
		name    string
		members []Member
		forGood map[string]bool
		want    string
	}{
		{"one voter", []Member{voter("a")}, nil, ""},
		{"second node waits", []Member{voter("a"), learner("b")}, nil, ""},
		{"third node joined", []Member{voter("a"), learner("b"), learner("c")}, nil, "b"},
		{"on to three", []Member{voter("a"), voter("b"), learner("c")}, nil, "c"},
		{"fourth node", []Member{voter("a"), voter("b"), voter("c"), learner("d")}, nil, "d"},
		{"unstarted learner", []Member{voter("a"), voter("b"), voter("c"), learner("")}, nil, ""},
		{"learner for good", []Member{voter("a"), voter("b"), voter("c"), learner("d")}, map[string]bool{"d": true}, ""},
		{"learner for good does not count", []Member{voter("a"), learner("b"), learner("c")}, map[string]bool{"c": true}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, ok := promotable(tc.members, tc.forGood)
			if got := map[bool]string{true: m.Name}[ok]; got != tc.want {
				t.Errorf("promotable = %q, want %q", got, tc.want)
			}
		})
	}
}

// testCA is a cluster CA with its owner and first CRL, for members that
// run in a test; their logs are printed if the test fails.
type testCA struct {
	t     testing.TB
	dir   string
	now   time.Time
	ca    *pki.CA
	owner *pki.Cert
	crl   []byte
	logs  *bytes.Buffer
}

func newTestCA(t testing.TB) *testCA {
	tc := &testCA{t: t, dir: t.TempDir(), now: time.Now(), logs: new(bytes.Buffer)}
	var err error
	if tc.ca, err = pki.NewCA("test", tc.now); err != nil {
		t.Fatal(err)
	}
	if tc.crl, err = tc.ca.CRL(1, nil, tc.now); err != nil {
		t.Fatal(err)
	}
	if tc.owner, err = pki.NewOwner("owner", tc.now); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("etcd's log:\n%s", tc.logs.String())
		}
	})
	return tc
}

// run starts a member with cfg and runs it until the test ends or stop
// is called; done says how Run ended.
func run(t testing.TB, ctx context.Context, cfg Config) (c *Consensus, done <-chan error, stop func()) {
	t.Helper()
	c, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	ended, finished := make(chan error, 1), make(chan struct{})
	go func() { ended <- c.Run(runCtx); close(finished) }()
	stop = func() {
		cancel()
		<-finished
	}
	t.Cleanup(stop)
	return c, ended, stop
}

// voterAndLearner runs a new cluster's member, n1 at voterIP, and a
// learner it added, n2 at learnerIP, until the test ends; stopVoter stops
// n1 sooner.
func (tc *testCA) voterAndLearner(ctx context.Context, voterIP, learnerIP string) (voter, learner *Consensus, learnerID uint64, stopVoter func()) {
	tc.t.Helper()
	voter, _, stopVoter = run(tc.t, ctx, tc.member("n1", voterIP, ModeNew))
	cfg, learnerID := tc.learner(ctx, voter, "n2", learnerIP)
	learner, _, _ = run(tc.t, ctx, cfg)
	return voter, learner, learnerID, stopVoter
}

// learner adds a learner named name at ip to the cluster of first, and
// returns its config and member ID.
func (tc *testCA) learner(ctx context.Context, first *Consensus, name, ip string) (Config, uint64) {
	tc.t.Helper()
	add, err := first.Client.MemberAddAsLearner(ctx, []string{"https://" + ip + ":2380"})
	if err != nil {
		tc.t.Fatal(err)
	}
	cfg := tc.member(name, ip, ModeJoin)
	for _, m := range add.Members {
		cfg.Peers = append(cfg.Peers, Peer{Name: m.Name, PeerURLs: m.PeerURLs})
	}
	return cfg, add.Member.ID
}

// member is the config of a member named name at ip, with its
// certificate files written. Each test's members have their own loopback
// addresses, apart from other packages' tests that run etcd at the same
// time (internal/cluster's TestJoinCrash takes 127.0.0.40 to .59).
func (tc *testCA) member(name, ip string, mode Mode) Config {
	tc.t.Helper()
	files := Files{Dir: filepath.Join(tc.dir, name, "pki")}
	node, err := tc.ca.Issue(name, []net.IP{net.ParseIP(ip)}, []string{"localhost"}, tc.now)
	if err != nil {
		tc.t.Fatal(err)
	}
	if err := files.Write(Bundle{CA: tc.ca.Cert, Cert: node.Cert, Key: node.Key, Owner: tc.owner.Cert, CRL: tc.crl}); err != nil {
		tc.t.Fatal(err)
	}
	addr := netip.MustParseAddr(ip)
	return Config{Name: name, Cluster: "test", DataDir: filepath.Join(tc.dir, name, "etcd"), PKI: files,
		Volume: filepath.Join(tc.dir, name), VolumeSize: 1 << 30,
		IP: addr, ListenIP: addr, Mode: mode,
		Log: slog.New(console.NewHandler(tc.logs)).With("member", name)}
}

// ownersCRL is CRL number of ca revoking serials, carrying the owner's
// signed revocations of number stmtNumber, which list the same serials.
func ownersCRL(t *testing.T, ca *pki.CA, owner *pki.Cert, number int64, stmtNumber uint64, serials ...*big.Int) []byte {
	t.Helper()
	der, err := authority.RevocationsCRL(ca, number, serials, owner.Cert, owner.Key,
		&authoritypb.Revocations{Cluster: "test", Number: stmtNumber, Serials: pki.Hex(serials)}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return der
}
