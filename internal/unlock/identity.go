// Package unlock is how a node gets its cluster unlock key back from its
// peers at boot, before its data volume (and etcd on it) is up: every
// node runs a Server that answers share requests, and a booting node
// Fetches shares until it has enough to recover its key (package escrow
// holds the cryptography): the protocol of the cluster layer of the
// keys' map (docs/keys.md).
//
// Both sides authenticate with TLS 1.3 and node certificates of the
// cluster CA, kept on the ESP with the key sealed to the TPM, and check
// each other against the cluster's CRL in force (the running member's
// own, which its watcher keeps current; before the member runs, the copy
// on the ESP): a removed node is refused its shares even while a majority
// is up, under its old certificate or any new one in its name, for the
// owner's revocations the CRL carries name it (authority.Revokes).
// Certificates are checked without their validity period: a cluster that
// lost power may boot with its clocks wrong, and must not lock itself out
// over that; node certificates are long-lived and revocation is by CRL.
//
// A holder answers only the node a certificate names, only a certificate
// of the key the node's escrow is bound to (every member holds the CA key
// and could sign one in another's name with a key of its own), and only
// for an envelope addressed to itself in the cluster it belongs to; the
// share travels sealed to a key the requester made for this boot. Every
// release and refusal is logged.
package unlock

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"time"

	"github.com/borough-os/borough/internal/authority"
	"github.com/borough-os/borough/internal/pki"
)

// Identity is a node's TLS identity in the cluster, and what it checks
// others against.
type Identity struct {
	// Cert is the node's certificate and key.
	Cert tls.Certificate
	// CA is the cluster CA.
	CA *x509.Certificate
	// CRL returns the cluster's revocation list in force, its signature
	// checked by whoever loaded it, or why there is none. A holder gives
	// no share without one.
	CRL func() (*x509.RevocationList, error)
}

// KeyHash is the SHA-256 of the identity's public key, which the node
// binds its escrow to (escrow.Binding).
func (id Identity) KeyHash() ([]byte, error) {
	if len(id.Cert.Certificate) == 0 {
		return nil, errors.New("the identity has no certificate")
	}
	leaf, err := x509.ParseCertificate(id.Cert.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("the identity's certificate: %w", err)
	}
	return pki.KeyHash(leaf), nil
}

// Verify checks a peer's certificate chain against the CA, whatever the
// time, and the CRL, and returns the peer's node name. With want set, the
// name must be want.
func (id Identity) Verify(rawCerts [][]byte, want string, usage x509.ExtKeyUsage) (string, error) {
	if len(rawCerts) == 0 {
		return "", errors.New("no certificate")
	}
	leaf, err := x509.ParseCertificate(rawCerts[0])
	if err != nil {
		return "", err
	}
	roots := x509.NewCertPool()
	roots.AddCert(id.CA)
	// The validity period is not checked (package doc): verify at a time
	// inside it.
	opts := x509.VerifyOptions{Roots: roots, CurrentTime: leaf.NotBefore.Add(time.Second), KeyUsages: []x509.ExtKeyUsage{usage}}
	if _, err := leaf.Verify(opts); err != nil {
		return "", fmt.Errorf("not a certificate of the cluster CA: %w", err)
	}
	name := leaf.Subject.CommonName
	if !pki.IsNodeName(name) {
		return "", fmt.Errorf("certificate names %q, not a node", name)
	}
	if want != "" && name != want {
		return "", fmt.Errorf("certificate names %s, want %s", name, want)
	}
	if revoked(id.CRL, leaf) {
		return "", fmt.Errorf("the certificate of %s is revoked", name)
	}
	return name, nil
}

// revoked says whether crl, if set and known, revokes cert.
func revoked(crl func() (*x509.RevocationList, error), cert *x509.Certificate) bool {
	if crl == nil {
		return false
	}
	l, _ := crl()
	return l != nil && authority.Revokes(l, cert) != ""
}
