package clusterkey

import (
	"bytes"
	"context"
	"crypto"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/borough-os/borough/internal/atomicfile"
	"github.com/borough-os/borough/internal/keyspace"
	"github.com/borough-os/borough/internal/pki"
	"github.com/borough-os/borough/internal/ticket"
	"github.com/borough-os/borough/internal/unlock"
)

// trust is what a published escrow key is checked against: the node's
// identity (the cluster CA and the CRL in force) and the owner (nil for a
// cluster without one).
type trust struct {
	cluster string
	id      unlock.Identity
	owner   *x509.Certificate
}

// trustOf is what the node checks its peers' escrow keys against.
func (k *Keeper) trustOf(m Member) (trust, error) {
	k.mu.Lock()
	id := k.id
	k.mu.Unlock()
	if id == nil {
		return trust{}, errors.New("the node has no identity yet")
	}
	owner, err := m.PKI.LoadOwner()
	if err != nil {
		return trust{}, err
	}
	return trust{cluster: m.Cluster, id: *id, owner: owner}, nil
}

// checkEscrowKey returns the escrow key that b, node's published record,
// holds, once it has checked that a certificate of the cluster CA in
// node's name, not revoked, signed it, and, in a cluster with an owner,
// that the owner admitted that certificate's key as node.
func checkEscrowKey(b []byte, t trust, node string) (*keyspace.EscrowKey, error) {
	r, cert, err := keyspace.ParseEscrowKey(b, t.cluster, node)
	if err != nil {
		return nil, err
	}
	if _, err := t.id.Verify([][]byte{r.Cert}, node, x509.ExtKeyUsageClientAuth); err != nil {
		return nil, err
	}
	if t.owner != nil {
		if err := ticket.CheckAdmission(r.Admission, t.owner, t.cluster, node, pki.KeyHash(cert)); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// publish puts the node's escrow public key pub in etcd, signed, with
// the node's admission (without one while it has none: peers then seal
// nothing to it, and the owner's `borough cluster admit` can admit its
// key), unless the record there is the one it would publish: a record a
// member rewrote is put back within a round of Maintain.
func (k *Keeper) publish(ctx context.Context, m Member, pub []byte) error {
	k.mu.Lock()
	id := k.id
	k.mu.Unlock()
	if id == nil {
		return errors.New("the node has no identity yet")
	}
	owner, err := m.PKI.LoadOwner()
	if err != nil {
		return err
	}
	admission, err := k.admission(ctx, m, owner, id)
	if errors.Is(err, ticket.ErrNotAdmitted) {
		k.waitForAdmission(err)
	} else if err != nil {
		return err
	}
	key := keyspace.EscrowKeys + m.Node
	rsp, err := m.Consensus.Client.Get(ctx, key)
	if err != nil {
		return fmt.Errorf("reading the published escrow key: %w", err)
	}
	if len(rsp.Kvs) == 1 && ownRecord(rsp.Kvs[0].Value, id, m, pub, admission) {
		return nil
	}
	signer, ok := id.Cert.PrivateKey.(crypto.Signer)
	if !ok {
		return fmt.Errorf("the node's identity cannot sign (a %T)", id.Cert.PrivateKey)
	}
	b, err := keyspace.SignEscrowKey(signer, id.Cert.Certificate[0], m.Cluster, m.Node, pub, admission)
	if err != nil {
		return err
	}
	if _, err := m.Consensus.Client.Put(ctx, key, string(b)); err != nil {
		return fmt.Errorf("publishing the escrow key: %w", err)
	}
	return nil
}

// ownRecord says whether b is the record the node would publish: pub
// and admission, signed with the key of the certificate of id.
func ownRecord(b []byte, id *unlock.Identity, m Member, pub, admission []byte) bool {
	r, cert, err := keyspace.ParseEscrowKey(b, m.Cluster, m.Node)
	return err == nil && cert.Equal(id.Cert.Leaf) && bytes.Equal(r.Key, pub) && bytes.Equal(r.Admission, admission)
}

// admission is the node's admission by owner (nil without an owner): the
// copy in its PKI files, else its record's in etcd, which it copies there
// once it has checked it; ErrNotAdmitted while it has none.
func (k *Keeper) admission(ctx context.Context, m Member, owner *x509.Certificate, id *unlock.Identity) ([]byte, error) {
	if owner == nil {
		return nil, nil
	}
	keyHash, err := id.KeyHash()
	if err != nil {
		return nil, err
	}
	if b, err := os.ReadFile(m.PKI.Admission()); err == nil && ticket.CheckAdmission(b, owner, m.Cluster, m.Node, keyHash) == nil {
		return b, nil
	}
	admission, err := RecordedAdmission(ctx, m.Consensus.Client, owner, m.Cluster, m.Node, keyHash)
	if err != nil {
		return nil, err
	}
	if err := atomicfile.Write(m.PKI.Admission(), admission, 0o600); err != nil {
		return nil, fmt.Errorf("keeping the node's admission: %w", err)
	}
	return admission, nil
}

// RecordedAdmission is node's admission by owner in its record in etcd
// (keyspace.NodeRecord), once it has checked it against the key whose
// SHA-256 is keyHash: any member can rewrite the record.
func RecordedAdmission(ctx context.Context, kv clientv3.KV, owner *x509.Certificate, cluster, node string, keyHash []byte) ([]byte, error) {
	rec, err := keyspace.ReadNode(ctx, kv, node)
	if err != nil {
		return nil, err
	}
	if err := ticket.CheckAdmission(rec.Admission, owner, cluster, node, keyHash); err != nil {
		return nil, err
	}
	return rec.Admission, nil
}

// publishedKey reads and checks the escrow key node published: nil if it
// published none, an error if what it published does not check.
func publishedKey(ctx context.Context, c *clientv3.Client, t trust, node string) ([]byte, error) {
	rsp, err := c.Get(ctx, keyspace.EscrowKeys+node)
	if err != nil || len(rsp.Kvs) != 1 {
		return nil, err
	}
	r, err := checkEscrowKey(rsp.Kvs[0].Value, t, node)
	if err != nil {
		return nil, fmt.Errorf("the escrow key published as node %s's: %w", node, err)
	}
	return r.Key, nil
}

// waitForAdmission says, once, that the node's escrow key goes without
// its admission by the owner, which a cluster's first node gets with the
// owner's first ticket (admin.MintTicket) and a node from before
// admissions with `borough cluster admit`: until then its peers seal it
// no shares.
func (k *Keeper) waitForAdmission(why error) {
	if k.saidWaiting.Swap(true) {
		return
	}
	k.Log.Info("the node has no admission by its owner yet: its peers seal it no shares until it has (a first node gets it with the owner's first ticket, a node from before admissions with borough cluster admit)", "why", why)
}
