package consensus

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"log/slog"
	"math/big"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/borough-os/borough/internal/console"
	"github.com/borough-os/borough/internal/keyspace"
	"github.com/borough-os/borough/internal/pki"
)

// TestConsensus runs a real one-member etcd on loopback: the local socket
// works, the TLS client port takes the owner's certificate and refuses a
// node's of the cluster CA and a stranger's, and the CRL watcher writes
// what is put in etcd once it has checked it.
func TestConsensus(t *testing.T) {
	dir := t.TempDir()
	files := Files{Dir: filepath.Join(dir, "pki")}
	now := time.Now()
	ca, err := pki.NewCA("test", now)
	if err != nil {
		t.Fatal(err)
	}
	node, err := ca.Issue("n1", []net.IP{net.IPv4(127, 0, 0, 9)}, []string{"localhost"}, now)
	if err != nil {
		t.Fatal(err)
	}
	crl, _ := ca.CRL(1, nil, now)
	owner, _ := pki.NewOwner("owner", now)
	if err := files.Write(Bundle{CA: ca.Cert, Cert: node.Cert, Key: node.Key, Owner: owner.Cert, CRL: crl}); err != nil {
		t.Fatal(err)
	}
	logs := etcdLog(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Its own loopback address, apart from other packages' tests that run
	// etcd at the same time.
	ip := netip.MustParseAddr("127.0.0.9")
	c, err := Start(ctx, Config{
		Name: "n1", Cluster: "test", DataDir: filepath.Join(dir, "etcd"), PKI: files,
		IP: ip, ListenIP: ip, Mode: ModeNew, Socket: filepath.Join(dir, "etcd.sock"),
		Log: slog.New(console.NewHandler(logs)),
	})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	defer func() {
		stop()
		<-done
	}()

	if _, err := c.Client.Put(ctx, "k", "v"); err != nil {
		t.Fatalf("put over the local socket: %v", err)
	}
	if c.ClusterID() == 0 || c.MemberID() == 0 {
		t.Error("no cluster or member ID")
	}

	remote := func(cert *pki.Cert) error {
		roots := x509.NewCertPool()
		roots.AddCert(ca.Cert)
		cfg := &tls.Config{RootCAs: roots}
		if cert != nil {
			cfg.Certificates = []tls.Certificate{{Certificate: [][]byte{cert.Cert.Raw}, PrivateKey: cert.Key}}
		}
		cl, err := clientv3.New(clientv3.Config{Endpoints: []string{"https://127.0.0.9:2379"}, TLS: cfg, DialTimeout: 5 * time.Second})
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

	// A CRL the CA did not sign, garbage, and an older CRL are refused
	// and leave the file as it was; then a newer one is put in force.
	otherCRL, _ := other.CRL(5, []*big.Int{member.Cert.SerialNumber}, now)
	newCRL, _ := ca.CRL(2, []*big.Int{stranger.Cert.SerialNumber}, now)
	for _, bad := range [][]byte{otherCRL, []byte("garbage"), crl} {
		if _, err := c.Client.Put(ctx, keyspace.CRL, string(bad)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Client.Put(ctx, keyspace.CRL, string(newCRL)); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		b, _ := os.ReadFile(files.CRL())
		if bytes.Equal(b, newCRL) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the CRL watcher did not write the new CRL")
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, refused := range []string{"not issued by the cluster CA", "not a DER revocation list"} {
		if !strings.Contains(logs.String(), refused) {
			t.Errorf("the log does not say a CRL was refused as %q", refused)
		}
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

// etcdLog is a buffer for the members' logs, printed if the test fails.
func etcdLog(t *testing.T) *bytes.Buffer {
	var logs bytes.Buffer
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("etcd's log:\n%s", logs.String())
		}
	})
	return &logs
}
