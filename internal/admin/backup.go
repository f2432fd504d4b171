package admin

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/borough-os/borough/internal/backup"
	"github.com/borough-os/borough/internal/keyspace"
	"github.com/borough-os/borough/internal/pki"
)

// Backup writes a backup of the cluster c reaches to w (package backup):
// a snapshot from the member c's endpoint names, with the cluster's name,
// CA and key, and CRL, encrypted to and signed by owner, the owner's key
// pair. It
// reads while the cluster serves: etcd's snapshot is of one revision,
// whatever is written meanwhile. progress is called with the snapshot
// bytes written so far.
func Backup(ctx context.Context, c *clientv3.Client, owner tls.Certificate, w io.Writer, progress func(int64)) (backup.Meta, error) {
	resp, err := c.Txn(ctx).Then(clientv3.OpGet(keyspace.Cluster), clientv3.OpGet(keyspace.CRL)).Commit()
	if err != nil {
		return backup.Meta{}, fmt.Errorf("reading the cluster: %w", err)
	}
	ca, err := keyspace.ReadCA(ctx, c)
	if err != nil {
		return backup.Meta{}, err
	}
	caKey, err := pki.KeyPEM(ca.Key)
	if err != nil {
		return backup.Meta{}, err
	}
	meta := backup.Meta{
		Cluster: string(keyspace.Value(resp, 0)), Taken: time.Now().UTC(), Revision: resp.Header.Revision,
		CA: pki.CertPEM(ca.Cert), CAKey: caKey, CRL: keyspace.Value(resp, 1),
	}
	snap, err := c.Snapshot(ctx)
	if err != nil {
		return meta, fmt.Errorf("taking a snapshot: %w", err)
	}
	defer snap.Close()
	return backup.Write(w, owner, snap, meta, progress)
}
