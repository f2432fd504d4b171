package clusterkey

import (
	"bytes"
	"context"
	"crypto"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/borough-os/borough/internal/atomicfile"
	"github.com/borough-os/borough/internal/authority"
	"github.com/borough-os/borough/internal/keyspace"
	"github.com/borough-os/borough/internal/pki"
	"github.com/borough-os/borough/internal/ticket"
	"github.com/borough-os/borough/internal/unlock"
)

// escrowKeyDomain starts what a node signs to publish its escrow key.
const escrowKeyDomain = "borough escrow key v1"

// trust is what a published escrow key is checked against: the cluster
// CA, the CRL in force and the owner (nil for a cluster without one).
type trust struct {
	cluster string
	ca      *x509.Certificate
	crl     func() (*x509.RevocationList, error)
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
	return trust{cluster: m.Cluster, ca: id.CA, crl: k.crlInForce, owner: owner}, nil
}

// escrowKeyMessage is what a node signs to publish pub as its escrow key.
func escrowKeyMessage(cluster, node string, pub []byte) []byte {
	return authority.Framed([]byte(escrowKeyDomain), []byte(cluster), []byte(node), pub)
}

// SignEscrowKey is the record that publishes pub as node's escrow key,
// signed with its identity id, with its admission.
func SignEscrowKey(id *unlock.Identity, cluster, node string, pub, admission []byte) ([]byte, error) {
	signer, ok := id.Cert.PrivateKey.(crypto.Signer)
	if !ok || len(id.Cert.Certificate) == 0 {
		return nil, fmt.Errorf("the node's identity cannot sign (a %T)", id.Cert.PrivateKey)
	}
	sum := sha256.Sum256(escrowKeyMessage(cluster, node, pub))
	sig, err := signer.Sign(rand.Reader, sum[:], crypto.SHA256)
	if err != nil {
		return nil, fmt.Errorf("signing the escrow key: %w", err)
	}
	return json.Marshal(keyspace.EscrowKey{Key: pub, Cert: id.Cert.Certificate[0], Signature: sig, Admission: admission})
}

// checkEscrowKey returns the escrow key that b, node's published record,
// holds, once it has checked that a certificate of the cluster CA in
// node's name, not revoked, signed it, and, in a cluster with an owner,
// that the owner admitted that certificate's key as node.
func checkEscrowKey(b []byte, t trust, node string) (*keyspace.EscrowKey, error) {
	var r keyspace.EscrowKey
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("the record is damaged: %w", err)
	}
	cert, err := x509.ParseCertificate(r.Cert)
	if err != nil {
		return nil, fmt.Errorf("its certificate: %w", err)
	}
	switch {
	case cert.CheckSignatureFrom(t.ca) != nil:
		return nil, errors.New("its certificate is not the cluster CA's")
	case cert.Subject.CommonName != node:
		return nil, fmt.Errorf("its certificate names %s", cert.Subject.CommonName)
	case revokedBy(t.crl, cert):
		return nil, fmt.Errorf("its certificate, serial %x, is revoked", cert.SerialNumber)
	}
	if err := cert.CheckSignature(x509.ECDSAWithSHA256, escrowKeyMessage(t.cluster, node, r.Key), r.Signature); err != nil {
		return nil, fmt.Errorf("its signature does not verify against its certificate: %w", err)
	}
	if t.owner != nil {
		if err := ticket.CheckAdmission(r.Admission, t.owner, t.cluster, node, pki.KeyHash(cert)); err != nil {
			return nil, err
		}
	}
	return &r, nil
}

// revokedBy says whether crl, if known, revokes cert.
func revokedBy(crl func() (*x509.RevocationList, error), cert *x509.Certificate) bool {
	l, _ := crl()
	return l != nil && authority.Revokes(l, cert) != ""
}

// publish puts the node's escrow public key pub in etcd, signed, unless
// what is there already checks and is pub under the node's certificate: a
// record a member rewrote is put back within a round of Maintain.
func (k *Keeper) publish(ctx context.Context, m Member, pub []byte) error {
	t, err := k.trustOf(m)
	if err != nil {
		return err
	}
	k.mu.Lock()
	id := k.id
	k.mu.Unlock()
	key := keyspace.EscrowKeys + m.Node
	rsp, err := m.Consensus.Client.Get(ctx, key)
	if err != nil {
		return fmt.Errorf("reading the published escrow key: %w", err)
	}
	if len(rsp.Kvs) == 1 {
		r, err := checkEscrowKey(rsp.Kvs[0].Value, t, m.Node)
		if err == nil && bytes.Equal(r.Key, pub) && bytes.Equal(r.Cert, id.Cert.Certificate[0]) {
			return nil
		}
	}
	admission, err := k.admission(ctx, m, t.owner, id)
	if err != nil {
		return err
	}
	b, err := SignEscrowKey(id, m.Cluster, m.Node, pub, admission)
	if err != nil {
		return err
	}
	if _, err := m.Consensus.Client.Put(ctx, key, string(b)); err != nil {
		return fmt.Errorf("publishing the escrow key: %w", err)
	}
	return nil
}

// admission is the node's admission by owner (nil without one): the
// copy in its PKI files, else its record's in etcd, which it copies there
// once it has checked it.
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
	rec, err := keyspace.ReadNode(ctx, m.Consensus.Client, m.Node)
	if err != nil {
		return nil, err
	}
	if err := ticket.CheckAdmission(rec.Admission, owner, m.Cluster, m.Node, keyHash); err != nil {
		return nil, err
	}
	if err := atomicfile.Write(m.PKI.Admission(), rec.Admission, 0o600); err != nil {
		return nil, fmt.Errorf("keeping the node's admission: %w", err)
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

// waitForAdmission says, once, that the node publishes no escrow key
// without its admission by the owner, which a cluster's first node gets
// with the owner's first ticket (admin.MintTicket).
func (k *Keeper) waitForAdmission(why error) {
	if k.saidWaiting.Swap(true) {
		return
	}
	k.Log.Info("not publishing the node's escrow key until the cluster holds its admission by the owner; a first node gets it with the owner's first ticket", "why", why)
}
