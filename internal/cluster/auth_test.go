package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/borough-os/borough/internal/keyspace"
)

// appCredential checks that etcd authentication is on, and that a
// credential the owner makes for an application, with a role over the
// application's keys, reads and writes those and none of Borough's.
func appCredential(t *testing.T, ctx context.Context, cl *clientv3.Client, ca *x509.Certificate, owner tls.Certificate) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		st, err := cl.AuthStatus(ctx)
		if err == nil && st.Enabled {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("etcd authentication is not on a minute after the cluster formed: %v, %v", st, err)
		}
	}
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
