package keyspace

import (
	"crypto"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/json"
	"fmt"

	"github.com/borough-os/borough/internal/authority"
)

// EscrowKey is a node's escrow public key as the node publishes it, JSON
// at EscrowKeys + its name. Any member can rewrite the record, so the node
// signs the key with its certificate's key and, in a cluster with an
// owner, shows its admission: a peer seals a share to the key only once
// it has checked both (package clusterkey), so that no member has its
// peers seal another node's shares to a key of its own. A node not yet
// admitted publishes its record without one, which peers do not seal to
// and the owner's `borough cluster admit` admits.
type EscrowKey struct {
	// Key is the X25519 public key, 32 bytes.
	Key []byte `json:"key"`
	// Cert is the node's certificate, DER, whose key made Signature.
	Cert      []byte `json:"cert"`
	Signature []byte `json:"signature"`
	// Admission is the node's (NodeRecord.Admission).
	Admission []byte `json:"admission,omitempty"`
}

// escrowKeyDomain starts what a node signs to publish its escrow key.
const escrowKeyDomain = "borough escrow key v1"

// escrowKeyMessage is what node signs to publish pub in cluster.
func escrowKeyMessage(cluster, node string, pub []byte) []byte {
	return authority.Framed([]byte(escrowKeyDomain), []byte(cluster), []byte(node), pub)
}

// SignEscrowKey is the record that publishes pub as node's escrow key in
// cluster, signed by key, the key of the node's certificate cert (DER),
// with its admission (none if nil).
func SignEscrowKey(key crypto.Signer, cert []byte, cluster, node string, pub, admission []byte) ([]byte, error) {
	sum := sha256.Sum256(escrowKeyMessage(cluster, node, pub))
	sig, err := key.Sign(rand.Reader, sum[:], crypto.SHA256)
	if err != nil {
		return nil, fmt.Errorf("signing the escrow key: %w", err)
	}
	return json.Marshal(EscrowKey{Key: pub, Cert: cert, Signature: sig, Admission: admission})
}

// ParseEscrowKey decodes node's record b in cluster and returns it with
// the certificate whose key signed it; who issued that certificate, and
// whether the owner admitted its key, is the caller's to check.
func ParseEscrowKey(b []byte, cluster, node string) (*EscrowKey, *x509.Certificate, error) {
	var r EscrowKey
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, nil, fmt.Errorf("the record is damaged: %w", err)
	}
	cert, err := x509.ParseCertificate(r.Cert)
	if err != nil {
		return nil, nil, fmt.Errorf("its certificate: %w", err)
	}
	if err := cert.CheckSignature(x509.ECDSAWithSHA256, escrowKeyMessage(cluster, node, r.Key), r.Signature); err != nil {
		return nil, nil, fmt.Errorf("its signature does not verify against its certificate: %w", err)
	}
	return &r, cert, nil
}
