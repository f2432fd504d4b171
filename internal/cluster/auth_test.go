package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/borough-os/borough/internal/admin"
	"github.com/borough-os/borough/internal/keyspace"
	"github.com/borough-os/borough/internal/pki"
	"github.com/borough-os/borough/internal/poll"
)

// appCredential checks that etcd authentication is on, and that a
// credential the owner makes for an application, with a role over the
// application's keys, reads and writes those and none of Borough's.
func appCredential(t *testing.T, ctx context.Context, cl *clientv3.Client, ca *x509.Certificate, owner tls.Certificate) {
	t.Helper()
	authOn(t, ctx, cl, time.Minute)
	if _, err := cl.RoleAdd(ctx, "app"); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.RoleGrantPermission(ctx, "app", "/app/", clientv3.GetPrefixRangeEnd("/app/"), clientv3.PermissionType(clientv3.PermReadWrite)); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.UserAdd(ctx, "app", "app's password"); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.UserGrantRole(ctx, "app", "app"); err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	app, err := clientv3.New(clientv3.Config{
		Endpoints: cl.Endpoints(), DialTimeout: 10 * time.Second, Username: "app", Password: "app's password",
		TLS: &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{owner}}, Logger: zap.NewNop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	if _, err := app.Put(ctx, "/app/k", "v"); err != nil {
		t.Errorf("the application writing its own key: %v", err)
	}
	for name, op := range map[string]func() error{
		"reading the CA key": func() error { _, err := app.Get(ctx, keyspace.CAKey); return err },
		"writing the CRL":    func() error { _, err := app.Put(ctx, keyspace.CRL, "x"); return err },
		"deleting Borough's keys": func() error {
			_, err := app.Delete(ctx, "/borough/", clientv3.WithPrefix())
			return err
		},
		"adding a member": func() error { _, err := app.MemberAddAsLearner(ctx, []string{"https://127.0.0.9:2380"}); return err },
	} {
		if err := op(); !errors.Is(err, rpctypes.ErrPermissionDenied) {
			t.Errorf("the application %s: %v, want %v", name, err, rpctypes.ErrPermissionDenied)
		}
	}
}

// admitOld plays m as a node that joined before Borough checked
// admissions (no admission in its record or files): the owner's
// ListUnadmitted shows it, and AdmitNodes admits it, once it has
// published an escrow key signed with its own key, and not before.
func admitOld(t *testing.T, ctx context.Context, cl *clientv3.Client, owner tls.Certificate, ownerCert *x509.Certificate, m *member) {
	t.Helper()
	name := m.mgr.nodeName(t)
	if _, err := keyspace.UpdateNode(ctx, cl, name, func(r *keyspace.NodeRecord, _ bool) error {
		r.Admission = nil
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	listed, err := admin.ListUnadmitted(ctx, cl)
	if err != nil || len(listed) != 1 || listed[0].Node != name || listed[0].Cert != nil || !strings.Contains(listed[0].Why, "published no escrow key") {
		t.Fatalf("ListUnadmitted with a node without an escrow key = %+v, %v", listed, err)
	}
	got, err := admin.AdmitNodes(ctx, cl, owner, listed)
	if err != nil || len(got) != 1 || got[0].Key != "" {
		t.Fatalf("AdmitNodes of a node without an escrow key = %+v, %v", got, err)
	}
	files := m.mgr.pkiFiles()
	certPEM, err := os.ReadFile(files.Cert())
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := os.ReadFile(files.Key())
	if err != nil {
		t.Fatal(err)
	}
	cert, err := pki.ParseCertPEM(certPEM)
	if err != nil {
		t.Fatal(err)
	}
	key, err := pki.ParseKeyPEM(keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := keyspace.SignEscrowKey(key, cert.Raw, "unit", name, make([]byte, 32), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Put(ctx, keyspace.EscrowKeys+name, string(rec)); err != nil {
		t.Fatal(err)
	}
	if listed, err = admin.ListUnadmitted(ctx, cl); err != nil || len(listed) != 1 || listed[0].Cert == nil || !listed[0].Cert.Equal(cert) {
		t.Fatalf("ListUnadmitted = %+v, %v; want node %s with its certificate", listed, err, name)
	}
	got, err = admin.AdmitNodes(ctx, cl, owner, listed)
	if err != nil || len(got) != 1 || got[0].Key != pki.Fingerprint(cert) {
		t.Fatalf("AdmitNodes = %+v, %v; want node %s admitted", got, err, name)
	}
	m.admitted(t, ctx, cl, ownerCert)
}

// authOn waits up to timeout for etcd's authentication to be on, which
// the member turns on once it runs.
func authOn(t *testing.T, ctx context.Context, cl *clientv3.Client, timeout time.Duration) {
	t.Helper()
	if err := poll.Until(ctx, timeout, 100*time.Millisecond, func() error {
		st, err := cl.AuthStatus(ctx)
		if err == nil && !st.Enabled {
			err = errors.New("authentication off")
		}
		return err
	}); err != nil {
		t.Fatalf("etcd authentication is not on: %v", err)
	}
}
