package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"filippo.io/age"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/borough-os/borough/datavol"
	"github.com/borough-os/borough/internal/backup"
	"github.com/borough-os/borough/internal/consensus"
	"github.com/borough-os/borough/internal/enrolment"
	"github.com/borough-os/borough/internal/keyspace"
	"github.com/borough-os/borough/internal/nodestate"
	"github.com/borough-os/borough/internal/pki"
	"github.com/borough-os/borough/internal/ticket"
)

// A first node whose bootstrap config names a backup (enrolment.Restore)
// starts its cluster from the backup rather than empty. The backup holds
// the CA's key and every key and value, so it is not in the config, which
// sits on the ESP in clear: the node opens its data volume and waits for
// its owner to send the backup through the node API (ReceiveBackup),
// encrypted to a key the node made for this wait (RestoreRecipient, which
// the owner reads through the node API once it checked the node's own
// key: no private key travels in a config), signed by the owner, and
// checks it against what the config says of it (checksum, size, CA,
// cluster, owner) before anything
// is written beyond the data volume. It then restores the snapshot as a
// new one-member cluster (consensus.Restore: new cluster and member IDs),
// with the backup's CA and the owner's revocations in force, and voids
// the old cluster's standing before its member serves: every node record
// becomes a tombstone (its name and key admit nobody again), the tickets
// and the escrow keys go. Other nodes join with new tickets.
//
// A restore cut short starts over (the node waits for the backup again):
// nothing is recorded before the snapshot is restored, and the records
// that are written are those of an unfinished bootstrap.

// backupWait is how often a node waiting for its backup says so.
const backupWait = time.Minute

// received is a backup the owner sent, checked: its snapshot's path on
// the data volume and its description.
type received struct {
	snapshot string
	meta     backup.Meta
}

// restore creates cluster from the backup the owner sends, as member
// name.
func (mg *Manager) restore(ctx context.Context, cluster, name string) (*consensus.Consensus, *nodestate.Record, error) {
	if mg.cfg.Enrolment.Spent() {
		return nil, nil, fmt.Errorf("the enrolment config's backup was restored already (its first node's ticket is erased): %w", enrolment.ErrSpent)
	}
	got, err := mg.awaitBackup(ctx)
	if err != nil {
		return nil, nil, err
	}
	defer os.Remove(got.snapshot)
	ca, err := pki.ParseCA(got.meta.CA, got.meta.CAKey)
	if err != nil {
		return nil, nil, fmt.Errorf("the backup: %w", err)
	}
	rec := &nodestate.Record{Phase: nodestate.PhaseBootstrapping, Cluster: cluster, Node: name}
	cfg := mg.consensusConfig(name, cluster, consensus.ModeNew)
	if err := consensus.Restore(cfg, got.snapshot); err != nil {
		return nil, nil, err
	}
	node, err := mg.writePKI(rec, ca, got.meta.CRL)
	if err != nil {
		return nil, nil, err
	}
	if err := mg.writeESPRecord(rec); err != nil {
		return nil, nil, err
	}
	c, err := consensus.Start(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	voided, err := mg.voidOldCluster(ctx, c)
	if err == nil {
		err = mg.storeCluster(ctx, c, cluster, ca, name, node)
	}
	if err == nil {
		err = mg.recordMember(rec, c)
	}
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	mg.log.Info("cluster restored from the owner's backup", "cluster", rec.Cluster, "id", rec.ClusterID,
		"taken", got.meta.Taken, "revision", got.meta.Revision, "old_nodes_voided", voided,
		"ca_fingerprint", pki.Fingerprint(ca.Cert))
	return c, rec, nil
}

// awaitBackup waits for ReceiveBackup to hand over the owner's backup,
// saying every backupWait what it waits for.
func (mg *Manager) awaitBackup(ctx context.Context) (received, error) {
	say := func() {
		mg.log.Info("waiting for the owner to send the backup to restore: borough node restore NODE BACKUP --enrolment CONFIG --node-key NODE_KEY",
			"cluster", mg.cfg.Enrolment.ClusterName, "revision", mg.cfg.Enrolment.Restore.Revision,
			"snapshot_sha256", mg.cfg.Enrolment.Restore.SnapshotSHA256)
	}
	transfer, err := age.GenerateX25519Identity()
	if err != nil {
		return received{}, fmt.Errorf("making the key the backup travels to: %w", err)
	}
	mg.transfer.Store(transfer)
	defer mg.transfer.Store(nil)
	say()
	tick := time.NewTicker(backupWait)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return received{}, ctx.Err()
		case got := <-mg.backups:
			return got, nil
		case <-tick.C:
			say()
		}
	}
}

// transferKey is the key a backup travels to this node encrypted to,
// while it waits for one; nil otherwise.
func (mg *Manager) transferKey() *age.X25519Identity {
	return mg.transfer.Load()
}

// RestoreRecipient is the recipient of the key the node made to receive
// the backup it waits for ("age1..."), for the owner's tool to encrypt
// the backup to; empty while it waits for none.
func (mg *Manager) RestoreRecipient() string {
	if t := mg.transferKey(); t != nil {
		return t.Recipient().String()
	}
	return ""
}

// ErrNoRestore says the node waits for no backup.
var ErrNoRestore = errors.New("this node waits for no backup: only a first node whose enrolment config names one (enrolment bootstrap --restore) restores it, once")

// ReceiveBackup reads the backup the owner sends the node, encrypted to
// the enrolment config's transfer key (backup.Reseal), checks it against
// the config, and hands it to the waiting restore. It refuses a backup
// the node does not wait for, and one that is not the config's, with the
// reason; it returns the backup's description.
func (mg *Manager) ReceiveBackup(ctx context.Context, r io.Reader) (backup.Meta, error) {
	transfer := mg.transferKey()
	if transfer == nil {
		return backup.Meta{}, ErrNoRestore
	}
	if !mg.receiving.TryLock() {
		return backup.Meta{}, errors.New("another backup is on its way to this node")
	}
	defer mg.receiving.Unlock()
	want := mg.cfg.Enrolment.Restore
	path := datavol.RestoreSnapshot.In(mg.cfg.DataRoot)
	meta, err := mg.readBackup(r, path, want, transfer)
	if err == nil {
		err = checkBackup(meta, mg.cfg.Enrolment)
	}
	if err != nil {
		os.Remove(path)
		return meta, err
	}
	select {
	case mg.backups <- received{snapshot: path, meta: meta}:
		return meta, nil
	case <-ctx.Done():
		os.Remove(path)
		return meta, ctx.Err()
	}
}

// readBackup decrypts the backup in r with the transfer key, writing its
// snapshot to path, no more than want's size.
func (mg *Manager) readBackup(r io.Reader, path string, want *enrolment.Restore, transfer age.Identity) (backup.Meta, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return backup.Meta{}, err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return backup.Meta{}, err
	}
	defer f.Close()
	meta, err := backup.Open(r, transfer, mg.cfg.Enrolment.Owner, &limitWriter{w: f, left: want.SnapshotSize})
	if errors.Is(err, errTooLarge) {
		return meta, fmt.Errorf("the backup's snapshot is larger than the %d bytes the enrolment config names", want.SnapshotSize)
	}
	if err != nil {
		return meta, err
	}
	if err := f.Sync(); err != nil {
		return meta, err
	}
	return meta, f.Close()
}

// checkBackup checks a backup's description against the enrolment config
// e that names it.
func checkBackup(m backup.Meta, e *enrolment.Enrolment) error {
	want := e.Restore
	ca, err := pki.ParseCertPEM(m.CA)
	if err != nil {
		return fmt.Errorf("the backup's CA: %w", err)
	}
	switch {
	case m.SnapshotSHA256 != want.SnapshotSHA256 || m.SnapshotSize != want.SnapshotSize:
		return fmt.Errorf("the backup's snapshot has %d bytes with SHA-256 %s; the enrolment config names %d, %s",
			m.SnapshotSize, m.SnapshotSHA256, want.SnapshotSize, want.SnapshotSHA256)
	case m.Cluster != e.ClusterName:
		return fmt.Errorf("the backup is of cluster %q; the enrolment config bootstraps %q", m.Cluster, e.ClusterName)
	case pki.Fingerprint(ca) != want.CAFingerprint:
		return fmt.Errorf("the backup's CA is %s; the enrolment config names %s", pki.Fingerprint(ca), want.CAFingerprint)
	case !bytes.Equal(m.Owner, pki.CertPEM(e.Owner)):
		return errors.New("the backup was made for another owner than the enrolment config's")
	}
	return nil
}

// voidOldCluster makes every node record of the backed-up cluster a
// tombstone, and removes its tickets and escrow keys, in one transaction,
// and returns how many nodes it voided.
func (mg *Manager) voidOldCluster(ctx context.Context, c *consensus.Consensus) (int, error) {
	resp, err := c.Client.Get(ctx, keyspace.Nodes, clientv3.WithPrefix())
	if err != nil {
		return 0, fmt.Errorf("reading the backup's nodes: %w", err)
	}
	ops := []clientv3.Op{
		clientv3.OpDelete(ticket.KeyPrefix, clientv3.WithPrefix()),
		clientv3.OpDelete(keyspace.EscrowKeys, clientv3.WithPrefix()),
	}
	voided := 0
	for _, kv := range resp.Kvs {
		r, err := keyspace.ParseNodeRecord(kv.Value)
		if err != nil {
			return 0, fmt.Errorf("the backup's record %s: %w", kv.Key, err)
		}
		if r.Removed {
			continue
		}
		r.Removed, r.MemberID = true, 0
		b, err := r.Marshal()
		if err != nil {
			return 0, err
		}
		ops = append(ops, clientv3.OpPut(string(kv.Key), string(b)))
		voided++
	}
	if _, err := c.Client.Txn(ctx).Then(ops...).Commit(); err != nil {
		return 0, fmt.Errorf("voiding the backed-up cluster's nodes, tickets and escrow: %w", err)
	}
	return voided, nil
}

// errTooLarge is a snapshot larger than its limitWriter takes.
var errTooLarge = errors.New("too large")

// limitWriter writes up to left bytes to w, and fails past them.
type limitWriter struct {
	w    io.Writer
	left int64
}

func (l *limitWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > l.left {
		return 0, errTooLarge
	}
	l.left -= int64(len(p))
	return l.w.Write(p)
}
