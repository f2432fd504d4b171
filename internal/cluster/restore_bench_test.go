package cluster

import (
	"context"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/borough-os/borough/internal/admin"
	"github.com/borough-os/borough/internal/pki"
)

// benchKeyspace is the size of the keyspace BenchmarkBackupRestore backs
// up, in values of benchValue bytes.
const (
	benchKeyspace = 100 << 20
	benchValue    = 64 << 10
)

// BenchmarkBackupRestore measures, on in-process members with real etcd,
// what a backup and a restore of a 100 MiB keyspace cost: the time of
// `cluster backup`'s work (a snapshot, encrypted to the owner, written to
// a file) and the file's size, and the time from the backup sent to a
// waiting first node (decrypted, resealed, checked, restored by etcd's
// snapshot restore) until it runs. Under emulation a node's disk and CPU
// are slower: these are the work's floor on this machine.
func BenchmarkBackupRestore(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ownerCert, owner := ownerIdentity(b)
	key := owner.PrivateKey.(*ecdsa.PrivateKey)
	_, ca, cl := firstMember(b, ctx, 21, "bench", ownerCert, owner)
	value := make([]byte, benchValue)
	for i := range benchKeyspace / benchValue {
		rand.Read(value)
		if _, err := cl.Put(ctx, fmt.Sprintf("bench/%05d", i), string(value)); err != nil {
			b.Fatal(err)
		}
	}
	path := filepath.Join(b.TempDir(), "bench.backup")
	for i := range b.N {
		f, err := os.Create(path)
		if err != nil {
			b.Fatal(err)
		}
		began := time.Now()
		meta, err := admin.Backup(ctx, cl, owner, f, nil)
		if err == nil {
			err = f.Sync()
		}
		f.Close()
		if err != nil {
			b.Fatal(err)
		}
		backedUp := time.Since(began)
		file, err := os.ReadFile(path)
		if err != nil {
			b.Fatal(err)
		}
		n := start(b, ctx, 22+i, restoreEnrolment(b, ownerCert, owner, pki.Fingerprint(ca), meta), "")
		n.wait(b, "waiting for the owner to send the backup to restore")
		began = time.Now()
		if _, err := n.mgr.ReceiveBackup(ctx, reseal(b, file, key, n.transferRecipient(b))); err != nil {
			b.Fatal(err)
		}
		n.wait(b, "node running cluster=bench")
		restored := time.Since(began)
		b.ReportMetric(backedUp.Seconds(), "backup-s")
		b.ReportMetric(float64(len(file))/(1<<20), "backup-MiB")
		b.ReportMetric(restored.Seconds(), "restore-s")
		checkRestoredKeys(b, ctx, n, ca, owner)
		n.stop()
		<-n.done
	}
}

// checkRestoredKeys checks that the member n restored holds every key of
// the benchmark's keyspace.
func checkRestoredKeys(b *testing.B, ctx context.Context, n *member, ca *x509.Certificate, owner tls.Certificate) {
	b.Helper()
	rc, err := admin.Connect([]string{n.ip.String() + ":2379"}, ca, owner)
	if err != nil {
		b.Fatal(err)
	}
	defer rc.Close()
	resp, err := rc.Get(ctx, "bench/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count != benchKeyspace/benchValue {
		b.Fatalf("the restored member holds %v keys (%v), want %d", resp, err, benchKeyspace/benchValue)
	}
}
