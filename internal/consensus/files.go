package consensus

import (
	"crypto"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"

	"github.com/borough-os/borough/internal/atomicfile"
	"github.com/borough-os/borough/internal/pki"
)

// Files are the PKI files etcd reads, in one directory.
type Files struct{ Dir string }

// Paths of the PKI files.
func (f Files) CA() string      { return filepath.Join(f.Dir, "ca.pem") }
func (f Files) Cert() string    { return filepath.Join(f.Dir, "node.pem") }
func (f Files) Key() string     { return filepath.Join(f.Dir, "node-key.pem") }
func (f Files) Trusted() string { return filepath.Join(f.Dir, "client-trust.pem") }
func (f Files) CRL() string     { return filepath.Join(f.Dir, "crl.der") }

// CAKey is the node's copy of the cluster CA's key, with which it gives
// itself a new certificate when its address changed while it was down
// (see package keyspace for who holds the CA key, and why).
func (f Files) CAKey() string { return filepath.Join(f.Dir, "ca-key.pem") }

// Bundle is what the PKI files hold.
type Bundle struct {
	// CA is the cluster CA; Cert the node's certificate, issued by it.
	CA, Cert *x509.Certificate
	// Key is the node's private key.
	Key crypto.Signer
	// Owner is the owner's certificate, nil for a cluster without one.
	Owner *x509.Certificate
	// CRL is the cluster's DER revocation list.
	CRL []byte
}

// Write writes the bundle's files, each atomically. The client port
// trusts the CA and the owner's certificate.
func (f Files) Write(b Bundle) error {
	key, err := pki.KeyPEM(b.Key)
	if err != nil {
		return err
	}
	trusted := pki.CertPEM(b.CA)
	if b.Owner != nil {
		trusted = append(trusted, pki.CertPEM(b.Owner)...)
	}
	if err := os.MkdirAll(f.Dir, 0o700); err != nil {
		return err
	}
	for _, file := range []struct {
		path string
		data []byte
	}{
		{f.Key(), key},
		{f.CA(), pki.CertPEM(b.CA)},
		{f.Cert(), append(pki.CertPEM(b.Cert), pki.CertPEM(b.CA)...)},
		{f.Trusted(), trusted},
		{f.CRL(), b.CRL},
	} {
		if err := atomicfile.Write(file.path, file.data, 0o600); err != nil {
			return fmt.Errorf("writing %s: %w", file.path, err)
		}
	}
	return nil
}
