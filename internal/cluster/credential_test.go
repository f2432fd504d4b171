package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/borough-os/borough/internal/admin"
	"github.com/borough-os/borough/internal/authority"
	"github.com/borough-os/borough/internal/keyspace"
	"github.com/borough-os/borough/internal/pki"
	"github.com/borough-os/borough/internal/poll"
)

// TestCredentialInProcess mints application credentials on a member with
// real etcd, authentication on, and uses them as an application's own
// etcd client would: each reaches its prefix, as it was granted, and
// nothing else, Borough's keys least; etcd's peer port refuses them; an
// applications CA not over the owner's key is refused; a revoked
// credential is refused at its next request, and at its next handshake
// once the member puts the owner's CRL in force.
func TestCredentialInProcess(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ownerCert, owner := ownerIdentity(t)
	m, ca, cl := firstMember(t, ctx, 31, "unit", ownerCert, owner)
	authOn(t, ctx, cl, 30*time.Second)
	now := time.Now()
	for _, tc := range []struct {
		name string
		p    admin.CredentialParams
		err  string
	}{
		{"every key", admin.CredentialParams{Name: "all", Prefix: "/", TTL: time.Hour}, "reaches Borough's own keys"},
		{"a prefix of Borough's", admin.CredentialParams{Name: "all", Prefix: "/bor", TTL: time.Hour}, "reaches Borough's own keys"},
		{"inside Borough's", admin.CredentialParams{Name: "ca", Prefix: keyspace.CAKey, TTL: time.Hour}, "reaches Borough's own keys"},
		{"no prefix", admin.CredentialParams{Name: "none", TTL: time.Hour}, "needs a --prefix"},
		{"a bad name", admin.CredentialParams{Name: "Billing App", Prefix: "/app/", TTL: time.Hour}, "credential name"},
		{"no lifetime", admin.CredentialParams{Name: "billing", Prefix: "/app/"}, "must be positive"},
	} {
		if _, _, err := admin.MintCredential(ctx, cl, tc.p, owner, now); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.err)
		}
	}
	forged, err := pki.NewOwner("owner", now)
	if err != nil {
		t.Fatal(err)
	}
	forgedCA, err := authority.NewApplicationsCA(forged.Cert, forged.Key, now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Put(ctx, keyspace.ApplicationsCA, string(pki.CertPEM(forgedCA))); err != nil {
		t.Fatal(err)
	}
	m.wait(t, "refused an applications CA")
	rw, _, err := admin.MintCredential(ctx, cl, admin.CredentialParams{Name: "billing", Prefix: "/app/", TTL: time.Hour}, owner, now)
	if err != nil {
		t.Fatal(err)
	}
	m.wait(t, "the client port trusts the owner's applications CA")
	app := appClient(t, ca, rw)
	if err := poll.Until(ctx, time.Minute, 10*time.Millisecond, func() error { return get(ctx, app, "/app/") }); err != nil {
		t.Fatalf("the credential does not reach the member after it was minted: %v", err)
	}
	ro, _, err := admin.MintCredential(ctx, cl, admin.CredentialParams{Name: "report", Prefix: "/app/", ReadOnly: true, TTL: time.Hour}, owner, now)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := admin.MintCredential(ctx, cl, admin.CredentialParams{Name: "billing", Prefix: "/other/", TTL: time.Hour}, owner, now); err == nil {
		t.Error("a second credential billing was minted")
	}
	report := appClient(t, ca, ro)
	checkEtcdctl(t, ca, rw)
	denied := func(err error) bool { return err != nil && strings.Contains(err.Error(), "permission denied") }
	for _, tc := range []struct {
		name string
		op   func(context.Context) error
		ok   bool
	}{
		{"write in its prefix", func(ctx context.Context) error { _, err := app.Put(ctx, "/app/x", "1"); return err }, true},
		{"read in its prefix", func(ctx context.Context) error { _, err := app.Get(ctx, "/app/x"); return err }, true},
		{"write outside", func(ctx context.Context) error { _, err := app.Put(ctx, "/other", "1"); return err }, false},
		{"read the CA key", func(ctx context.Context) error { _, err := app.Get(ctx, keyspace.CAKey); return err }, false},
		{"read every key", func(ctx context.Context) error { _, err := app.Get(ctx, "", clientv3.WithPrefix()); return err }, false},
		{"add a user", func(ctx context.Context) error { _, err := app.UserAdd(ctx, "me", "pw"); return err }, false},
		{"read-only reads", func(ctx context.Context) error { _, err := report.Get(ctx, "/app/x"); return err }, true},
		{"read-only writes", func(ctx context.Context) error { _, err := report.Put(ctx, "/app/y", "1"); return err }, false},
	} {
		opCtx, opCancel := context.WithTimeout(ctx, 10*time.Second)
		err := tc.op(opCtx)
		opCancel()
		if tc.ok && err != nil || !tc.ok && !denied(err) {
			t.Errorf("%s: %v, want allowed %v", tc.name, err, tc.ok)
		}
	}
	if err := handshake(rw, ca, "127.0.0.31:2379"); err != nil {
		t.Fatalf("the client port refused the credential at the handshake: %v", err)
	}
	if err := handshake(rw, ca, "127.0.0.31:2380"); err == nil || !strings.Contains(err.Error(), "remote error: tls") {
		t.Errorf("the peer port's answer to an application credential: %v, want a TLS alert", err)
	}
	checkSession(t, ctx, cl, ca, owner)
	if _, err := cl.UserAdd(ctx, "app:taken", "pw"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := admin.MintCredential(ctx, cl, admin.CredentialParams{Name: "taken", Prefix: "/t/", TTL: time.Hour}, owner, now); err == nil ||
		!strings.Contains(err.Error(), "etcd has a user app:taken already") {
		t.Errorf("a credential over an existing etcd user: %v", err)
	}
	if _, err := admin.RevokeCredential(ctx, cl, "billing", owner, nil); err != nil {
		t.Fatal(err)
	}
	if err := get(ctx, app, "/app/x"); err == nil {
		t.Error("a revoked credential still reads on its open connection")
	}
	// etcd checks its CRL once the handshake is done, and hangs up.
	if err := poll.Until(ctx, 30*time.Second, 250*time.Millisecond, func() error {
		err := handshake(rw, ca, "127.0.0.31:2379")
		if errors.Is(err, io.EOF) || err != nil && strings.Contains(err.Error(), "remote error: tls") {
			return nil
		}
		return fmt.Errorf("the handshake: %v", err)
	}); err != nil {
		t.Fatalf("a new connection with a revoked credential is not refused at its handshake: %v", err)
	}
	if err := get(ctx, report, "/app/x"); err != nil {
		t.Errorf("revoking billing ended report too: %v", err)
	}
	if list, err := admin.Credentials(ctx, cl); err != nil || len(list) != 1 || list["report"].Prefix != "/app/" {
		t.Errorf("the credentials after billing's revocation: %v, %v", list, err)
	}
}

// get reads key with c, for at most 5 s: etcd's client retries a
// connection the server refuses until its context ends.
func get(ctx context.Context, c *clientv3.Client, key string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := c.Get(ctx, key)
	return err
}

// appClient is an application's etcd client with credential cred.
func appClient(t *testing.T, ca *x509.Certificate, cred *pki.Cert) *clientv3.Client {
	t.Helper()
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	c, err := clientv3.New(clientv3.Config{
		Endpoints: []string{"127.0.0.31:2379"}, DialTimeout: 5 * time.Second,
		TLS: &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{{Certificate: [][]byte{cred.Cert.Raw}, PrivateKey: cred.Key}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// handshake connects to addr with cred, as a gRPC client (ALPN h2), and
// reads: it returns the alert of a server that refused cred, or the end
// of a connection it hung up, or nil if the server spoke (gRPC's server
// sends its HTTP/2 settings first) or said nothing within a second (the
// peer port waits for the client).
func handshake(cred *pki.Cert, ca *x509.Certificate, addr string) error {
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: roots, ServerName: "127.0.0.31", NextProtos: []string{"h2"},
		Certificates: []tls.Certificate{{Certificate: [][]byte{cred.Cert.Raw}, PrivateKey: cred.Key}}})
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(time.Second))
	_, err = conn.Read(make([]byte, 1))
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return nil
	}
	return err
}

// checkEtcdctl uses cred with Debian's etcdctl, as an application's tools
// would: it writes its prefix, and is refused Borough's CA key.
func checkEtcdctl(t *testing.T, ca *x509.Certificate, cred *pki.Cert) {
	t.Helper()
	dir := t.TempDir()
	key, err := pki.KeyPEM(cred.Key)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{"ca.pem": pki.CertPEM(ca), "cred.pem": pki.CertPEM(cred.Cert), "cred-key.pem": key}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		args []string
		ok   bool
	}{
		{[]string{"put", "/app/etcdctl", "1"}, true},
		{[]string{"get", keyspace.CAKey}, false},
	} {
		cmd := exec.Command("etcdctl", append([]string{"--endpoints=https://127.0.0.31:2379", "--command-timeout=10s",
			"--cacert=" + filepath.Join(dir, "ca.pem"), "--cert=" + filepath.Join(dir, "cred.pem"), "--key=" + filepath.Join(dir, "cred-key.pem")},
			tc.args...)...)
		cmd.Env = append(os.Environ(), "ETCDCTL_API=3")
		out, err := cmd.CombinedOutput()
		if tc.ok && err != nil || !tc.ok && (err == nil || !strings.Contains(string(out), "permission denied")) {
			t.Errorf("etcdctl %s with the credential: %v\n%s", strings.Join(tc.args, " "), err, out)
		}
	}
}

// checkSession mints owner sessions, as borough etcd env does, on a
// member that trusts the owner's applications CA: a live one is etcd's
// root (it reads the CA key), an expired one is refused at the handshake.
func checkSession(t *testing.T, ctx context.Context, cl *clientv3.Client, ca *x509.Certificate, owner tls.Certificate) {
	t.Helper()
	live, fresh, err := admin.MintSession(ctx, cl, owner, time.Hour, time.Now())
	if err != nil || fresh {
		t.Fatalf("an owner session: fresh %v, %v", fresh, err)
	}
	if _, err := appClient(t, ca, live).Get(ctx, keyspace.CAKey); err != nil {
		t.Errorf("an owner session reading the CA key: %v", err)
	}
	expired, _, err := admin.MintSession(ctx, cl, owner, time.Hour, time.Now().Add(-2*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if err := handshake(expired, ca, "127.0.0.31:2379"); err == nil {
		t.Error("the client port took an expired owner session")
	}
}
