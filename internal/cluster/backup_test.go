package cluster

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/borough-os/borough/internal/admin"
	"github.com/borough-os/borough/internal/backup"
	"github.com/borough-os/borough/internal/pki"
)

// backUpUnderLoad backs the cluster cl reaches up as owner while a
// writer puts keys (TestJoinInProcess), and checks the backup: it opens
// with the owner's key, its snapshot is etcd's, whole, and holds the
// writes acknowledged before it began, and it names the cluster and its
// CA.
func backUpUnderLoad(t *testing.T, ctx context.Context, cl *clientv3.Client, ca *x509.Certificate, owner tls.Certificate) {
	t.Helper()
	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var acked int
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; wctx.Err() == nil; i++ {
			if _, err := cl.Put(wctx, fmt.Sprintf("load/%06d", i), "v"); err == nil {
				acked++
			}
		}
	}()
	var file bytes.Buffer
	meta, err := admin.Backup(ctx, cl, owner, &file, nil)
	stop()
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("backup of %d bytes (snapshot %d) with %d writes acknowledged meanwhile", file.Len(), meta.SnapshotSize, acked)
	path := filepath.Join(t.TempDir(), "snapshot")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	got, err := backup.Read(&file, owner, f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	keys, err := backup.CheckSnapshot(path)
	if err != nil {
		t.Fatal(err)
	}
	if keys == 0 || got.Cluster != "unit" || !bytes.Equal(got.CA, pki.CertPEM(ca)) || len(got.CAKey) == 0 || got.Revision == 0 {
		t.Errorf("the backup holds %d key revisions, cluster %q, CA %t, CA key %d bytes, revision %d",
			keys, got.Cluster, bytes.Equal(got.CA, pki.CertPEM(ca)), len(got.CAKey), got.Revision)
	}
}
