package cluster

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	"github.com/borough-os/borough/internal/admin"
	"github.com/borough-os/borough/internal/backup"
	"github.com/borough-os/borough/internal/enrolment"
	"github.com/borough-os/borough/internal/join"
	"github.com/borough-os/borough/internal/keyspace"
	"github.com/borough-os/borough/internal/pki"
	"github.com/borough-os/borough/internal/poll"
	"github.com/borough-os/borough/proto/enrolmentpb"
)

// TestRestoreInProcess backs a one-member cluster up and restores the
// backup on a new first node: a backup sent to a node that waits for
// none, sealed to another transfer key, or not the config's, is refused
// and leaves the node waiting; the config's is restored, under a new
// cluster ID, with every key written before it, the backed-up node a
// tombstone and its ticket unknown; and a new node joins with a new
// ticket.
func TestRestoreInProcess(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ownerCert, owner := ownerIdentity(t)
	key := owner.PrivateKey.(*ecdsa.PrivateKey)
	old, ca, cl := firstMember(t, ctx, 11, "unit", ownerCert, owner)
	for _, k := range []string{"a", "b", "c"} {
		if _, err := cl.Put(ctx, "app/"+k, k); err != nil {
			t.Fatal(err)
		}
	}
	oldTicket, err := admin.MintTicket(ctx, cl, admin.TicketParams{}, owner)
	if err != nil {
		t.Fatal(err)
	}
	var file, other bytes.Buffer
	meta, err := admin.Backup(ctx, cl, owner, &file, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Put(ctx, "app/d", "after the backup"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Backup(ctx, cl, owner, &other, nil); err != nil {
		t.Fatal(err)
	}
	oldID := clusterID(t, ctx, cl)

	stranger, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := old.mgr.ReceiveBackup(ctx, reseal(t, file.Bytes(), key, stranger.Recipient())); !errors.Is(err, ErrNoRestore) {
		t.Errorf("a backup sent to a running member: %v, want %v", err, ErrNoRestore)
	}
	n := start(t, ctx, 12, restoreEnrolment(t, ownerCert, owner, pki.Fingerprint(ca), meta), "")
	n.wait(t, "waiting for the owner to send the backup to restore")
	transfer := n.transferRecipient(t)
	for _, tc := range []struct {
		name, want string
		body       *bytes.Reader
	}{
		{"sealed to another node's transfer key", "not encrypted to this node's transfer key", reseal(t, file.Bytes(), key, stranger.Recipient())},
		// Larger, or as large (the revision's bytes vary): refused as
		// soon as it is larger, else once whole.
		{"a later backup than the config names", "the enrolment config names", reseal(t, other.Bytes(), key, transfer)},
	} {
		if _, err := n.mgr.ReceiveBackup(ctx, tc.body); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.want)
		}
	}
	got, err := n.mgr.ReceiveBackup(ctx, reseal(t, file.Bytes(), key, transfer))
	if err != nil || got.SnapshotSHA256 != meta.SnapshotSHA256 {
		t.Fatalf("the config's backup: %+v, %v", got, err)
	}
	n.wait(t, "cluster restored from the owner's backup")
	n.wait(t, "node running cluster=unit")

	rc, err := admin.Connect([]string{"127.0.0.12:2379"}, ca, owner)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if id := clusterID(t, ctx, rc); id == oldID {
		t.Errorf("the restored cluster has the backed-up cluster's ID %x", id)
	}
	resp, err := rc.Get(ctx, "app/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, kv := range resp.Kvs {
		keys = append(keys, string(kv.Key))
	}
	if strings.Join(keys, ",") != "app/a,app/b,app/c" {
		t.Errorf("the restored cluster holds %v, want the keys written before the backup", keys)
	}
	rec, err := keyspace.ReadNode(ctx, rc, old.mgr.nodeName(t))
	if err != nil || !rec.Removed {
		t.Errorf("the backed-up node's record after the restore: %+v, %v; want a tombstone", rec, err)
	}
	replay := proto.Clone(oldTicket).(*enrolmentpb.Ticket)
	replay.JoinEndpoints = []string{"127.0.0.12:7834"}
	// The join endpoint starts beside the member: until it listens, the
	// check finds nobody.
	var refusal *join.Refusal
	if err := poll.Until(ctx, 30*time.Second, 100*time.Millisecond, func() error {
		if err := join.Check(ctx, replay); !errors.As(err, &refusal) {
			return fmt.Errorf("join.Check = %v, want a refusal", err)
		}
		return nil
	}); err != nil {
		t.Fatalf("a ticket of the backed-up cluster at the restored one: %v", err)
	}
	// The old node is void; the owner revokes it (borough node restore
	// --cluster), after which the restored cluster tells it, with the
	// owner's word, that it was removed.
	if voided, err := admin.VoidedNodes(ctx, rc); err != nil || !slices.Equal(voided, []string{old.mgr.nodeName(t)}) {
		t.Fatalf("VoidedNodes = %v, %v; want the backed-up node", voided, err)
	}
	if _, err := admin.RemoveNode(ctx, rc, old.mgr.nodeName(t), owner, nil); err != nil {
		t.Fatal(err)
	}
	if voided, err := admin.VoidedNodes(ctx, rc); err != nil || len(voided) != 0 {
		t.Errorf("VoidedNodes after the owner revoked them = %v, %v", voided, err)
	}
	f := old.mgr.pkiFiles()
	oldCert, err := tls.LoadX509KeyPair(f.Cert(), f.Key())
	if err != nil {
		t.Fatal(err)
	}
	// The member puts the new CRL in force within seconds of its write
	// (its CRL watcher), and answers by the one in force.
	if err := poll.Until(ctx, 30*time.Second, 200*time.Millisecond, func() error {
		removed, err := join.Status(ctx, []string{"127.0.0.12:7834"}, readCA(t, n), ownerCert, oldCert)
		if err == nil && !removed {
			err = errors.New("not removed")
		}
		return err
	}); err != nil {
		t.Fatalf("the old node's status at the restored cluster after its revocation: %v; want removed", err)
	}
	tk, err := admin.MintTicket(ctx, rc, admin.TicketParams{}, owner)
	if err != nil {
		t.Fatal(err)
	}
	j := start(t, ctx, 13, &enrolment.Enrolment{ClusterName: "unit", Ticket: tk, Owner: ownerCert}, "")
	j.wait(t, "node running cluster=unit")
	cancel()
	for _, m := range []*member{old, n, j} {
		if err := <-m.done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("member %s: %v", m.ip, err)
		}
	}
}

// reseal is the backup b resealed to the transfer key to.
func reseal(t testing.TB, b []byte, key *ecdsa.PrivateKey, to age.Recipient) *bytes.Reader {
	t.Helper()
	var out bytes.Buffer
	if err := backup.Reseal(&out, bytes.NewReader(b), key, to); err != nil {
		t.Fatal(err)
	}
	return bytes.NewReader(out.Bytes())
}

// restoreEnrolment is the config of a first node that restores the
// backup meta describes, of a cluster whose CA has fingerprint caFP, as
// enrolment bootstrap --restore makes it: with the first node's ticket.
func restoreEnrolment(t testing.TB, ownerCert *x509.Certificate, owner tls.Certificate, caFP string, meta backup.Meta) *enrolment.Enrolment {
	t.Helper()
	tk, stmt, err := admin.FounderTicket(owner, meta.Cluster)
	if err != nil {
		t.Fatal(err)
	}
	return &enrolment.Enrolment{ClusterName: meta.Cluster, Owner: ownerCert, FounderTicket: tk, FounderStatement: stmt,
		Restore: &enrolment.Restore{
			CAFingerprint: caFP, SnapshotSHA256: meta.SnapshotSHA256, SnapshotSize: meta.SnapshotSize, Revision: meta.Revision,
		}}
}

// transferRecipient is the key m made to receive the backup it waits for.
func (m *member) transferRecipient(t testing.TB) age.Recipient {
	t.Helper()
	to, err := age.ParseX25519Recipient(m.mgr.RestoreRecipient())
	if err != nil {
		t.Fatalf("the key the node waits for its backup with: %v", err)
	}
	return to
}

// readCA is the CA of m's cluster.
func readCA(t testing.TB, m *member) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(m.mgr.pkiFiles().CA())
	if err != nil {
		t.Fatal(err)
	}
	ca, err := pki.ParseCertPEM(b)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// firstMember starts member n, which bootstraps cluster for the owner
// ownerCert, waits until it runs, and returns it, its CA and a client of
// its client port as owner, closed when t ends.
func firstMember(t testing.TB, ctx context.Context, n int, cluster string, ownerCert *x509.Certificate, owner tls.Certificate) (*member, *x509.Certificate, *clientv3.Client) {
	t.Helper()
	m := start(t, ctx, n, &enrolment.Enrolment{ClusterName: cluster, Owner: ownerCert}, "")
	m.wait(t, "node running cluster="+cluster)
	ca := readCA(t, m)
	cl, err := admin.Connect([]string{m.ip.String() + ":2379"}, ca, owner)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return m, ca, cl
}

// clusterID is the ID of the cluster cl reaches.
func clusterID(t testing.TB, ctx context.Context, cl *clientv3.Client) uint64 {
	t.Helper()
	tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := cl.MemberList(tctx)
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.ClusterId
}
