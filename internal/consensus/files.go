package consensus

import (
	"bytes"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/borough-os/borough/internal/atomicfile"
	"github.com/borough-os/borough/internal/authority"
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

// Owner is the owner's certificate, for the node's own services to know
// their owner by (a joined node's enrolment does not name it); absent for
// a cluster without an owner.
func (f Files) Owner() string { return filepath.Join(f.Dir, "owner.pem") }

// LoadOwner reads the owner's certificate; nil, for a cluster without an
// owner.
func (f Files) LoadOwner() (*x509.Certificate, error) {
	owner, err := pki.ReadCertPEM(f.Owner())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	return owner, err
}

// LoadCert reads the node's certificate.
func (f Files) LoadCert() (*x509.Certificate, error) { return pki.ReadCertPEM(f.Cert()) }

// LoadCA reads the cluster CA's certificate.
func (f Files) LoadCA() (*x509.Certificate, error) { return pki.ReadCertPEM(f.CA()) }

// LoadIdentity reads the node's certificate and key as the node presents
// them: the certificate file holds the CA's certificate after the node's
// (Write), so the chain is whole.
func (f Files) LoadIdentity() (*tls.Certificate, error) {
	cert, err := tls.LoadX509KeyPair(f.Cert(), f.Key())
	if err != nil {
		return nil, err
	}
	return &cert, nil
}

// LoadSigningCA reads the node's copy of the cluster CA with its key
// (CAKey), with which the node gives itself a certificate.
func (f Files) LoadSigningCA() (*pki.CA, error) {
	certPEM, err := os.ReadFile(f.CA())
	if err != nil {
		return nil, err
	}
	keyPEM, err := os.ReadFile(f.CAKey())
	if err != nil {
		return nil, err
	}
	return pki.ParseCA(certPEM, keyPEM)
}

// CAKey is the node's copy of the cluster CA's key, with which it gives
// itself a new certificate when its address changed while it was down
// (see package keyspace for who holds the CA key, and why).
func (f Files) CAKey() string { return filepath.Join(f.Dir, "ca-key.pem") }

// Admission is the node's admission by the owner
// (borough.authority.Admission), in a cluster with an owner: the node
// shows it with its escrow key, so that peers know the key is the one
// the owner admitted under its name.
func (f Files) Admission() string { return filepath.Join(f.Dir, "admission.pb") }

// Succession is the last owner hand-over the node took
// (authority.KindSuccession), absent while it has the owner it was
// enrolled with: the next it takes must be numbered higher.
func (f Files) Succession() string { return filepath.Join(f.Dir, "succession.pb") }

// TakenSuccession is the number of the last owner hand-over the node
// took; 0 for none.
func (f Files) TakenSuccession() (uint64, error) {
	b, err := os.ReadFile(f.Succession())
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	n, err := authority.SuccessionNumber(b)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", f.Succession(), err)
	}
	return n, nil
}

// HandOver makes h's owner the node's, with the statement that says so,
// all at once, and more with them: the owner's certificate, the one the
// client port trusts (which etcd reads when it starts) and the
// succession taken.
func (f Files) HandOver(h authority.Handover, more ...atomicfile.File) error {
	owner := pki.CertPEM(h.Owner)
	err := atomicfile.WriteAll(append([]atomicfile.File{
		{Path: f.Owner(), Data: owner, Perm: 0o600},
		{Path: f.Trusted(), Data: owner, Perm: 0o600},
		{Path: f.Succession(), Data: h.Statement, Perm: 0o600},
	}, more...)...)
	if err != nil {
		return fmt.Errorf("taking owner succession %d: %w", h.Number, err)
	}
	return nil
}

// TrustApplications makes the client port trust apps, the owner's
// applications CA (authority.CheckApplicationsCA, which the caller has
// checked), beside the owner, and says whether that changed the file:
// etcd reads it when it starts.
func (f Files) TrustApplications(apps *x509.Certificate) (bool, error) {
	owner, err := f.LoadOwner()
	if err != nil || owner == nil {
		return false, err
	}
	want := append(pki.CertPEM(owner), pki.CertPEM(apps)...)
	if have, err := os.ReadFile(f.Trusted()); err == nil && bytes.Equal(have, want) {
		return false, nil
	}
	if err := atomicfile.Write(f.Trusted(), want, 0o600); err != nil {
		return false, fmt.Errorf("trusting the owner's applications CA: %w", err)
	}
	return true, nil
}

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
	// CAKey is the cluster CA's key, for the node that keeps a copy
	// (CAKey); nil leaves that file as it is.
	CAKey crypto.Signer
	// Admission is the node's admission (Admission); nil leaves that file
	// as it is.
	Admission []byte
}

// Write writes the bundle's files, and more, each atomically, with two
// syncs for them all (atomicfile.WriteAll): a caller's record that must
// appear with the files, or not at all, costs no syncs of its own.
//
// The client port trusts the owner's certificate alone, not the cluster CA:
// members reach their own etcd in process and each other through the peer
// port, so no node certificate needs the client port, and a node's identity,
// stolen or minted with a leaked CA key, gives no access to the data through
// it. A cluster without an owner trusts a certificate whose key was thrown
// away at once: etcd needs some trust anchor to require client certificates,
// and nobody holds this one's key.
func (f Files) Write(b Bundle, more ...atomicfile.File) error {
	key, err := pki.KeyPEM(b.Key)
	if err != nil {
		return err
	}
	owner := b.Owner
	if owner == nil {
		nobody, err := pki.NewCA("no owner", time.Now())
		if err != nil {
			return err
		}
		owner = nobody.Cert
	}
	trusted := pki.CertPEM(owner)
	files := []atomicfile.File{
		{Path: f.Key(), Data: key, Perm: 0o600},
		{Path: f.CA(), Data: pki.CertPEM(b.CA), Perm: 0o600},
		{Path: f.Cert(), Data: append(pki.CertPEM(b.Cert), pki.CertPEM(b.CA)...), Perm: 0o600},
		{Path: f.Trusted(), Data: trusted, Perm: 0o600},
		{Path: f.CRL(), Data: b.CRL, Perm: 0o600},
	}
	if b.Owner != nil {
		files = append(files, atomicfile.File{Path: f.Owner(), Data: trusted, Perm: 0o600})
	}
	if b.Admission != nil {
		files = append(files, atomicfile.File{Path: f.Admission(), Data: b.Admission, Perm: 0o600})
	}
	if b.CAKey != nil {
		caKey, err := pki.KeyPEM(b.CAKey)
		if err != nil {
			return err
		}
		files = append(files, atomicfile.File{Path: f.CAKey(), Data: caKey, Perm: 0o600})
	}
	if err := atomicfile.WriteAll(append(files, more...)...); err != nil {
		return fmt.Errorf("writing the PKI files: %w", err)
	}
	return nil
}
