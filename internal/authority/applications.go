package authority

import (
	"bytes"
	"crypto"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/borough-os/borough/internal/pki"
)

// The applications CA is the owner's word that applications may reach
// etcd's client port with credentials the owner signs. etcd's client port
// trusts the owner's certificate alone (consensus.Files.Write), a leaf:
// nothing it signs is a certificate etcd would take. So the owner makes a
// CA certificate over the same key, self-signed, for client
// authentication only and one level deep; a node that finds it in etcd
// checks that its key is its owner's and adds it to what its client port
// trusts. No new secret: the owner's key signs the credentials, and
// handing the cluster over (a new owner, a new key) withdraws them all.
// Not the cluster CA, whose key every member holds: a credential names
// its etcd user, and a member must not be able to mint one for root.

// applicationsOrg marks the applications CA.
const applicationsOrg = "Borough applications"

// applicationsValidity is how long an applications CA is valid: as long
// as the owner's certificate, at most (the owner's is ten years).
const applicationsValidity = 10 * 365 * 24 * time.Hour

// NewApplicationsCA makes the applications CA of owner, whose key is key.
func NewApplicationsCA(owner *x509.Certificate, key crypto.Signer, now time.Time) (*x509.Certificate, error) {
	until := now.Add(applicationsValidity)
	if owner.NotAfter.Before(until) {
		until = owner.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber:          pki.NewSerial(),
		Subject:               pkix.Name{CommonName: "Borough applications of " + owner.Subject.CommonName, Organization: []string{applicationsOrg}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              until,
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, owner.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("making the applications CA: %w", err)
	}
	return x509.ParseCertificate(der)
}

// CheckApplicationsCA says why ca is not owner's applications CA, or nil
// if it is.
func CheckApplicationsCA(ca, owner *x509.Certificate) error {
	switch {
	case owner == nil:
		return errors.New("a cluster without an owner has no applications CA")
	case !slices.Equal(ca.Subject.Organization, []string{applicationsOrg}):
		return fmt.Errorf("%q is not an applications CA", ca.Subject.CommonName)
	case !bytes.Equal(ca.RawSubjectPublicKeyInfo, owner.RawSubjectPublicKeyInfo):
		return fmt.Errorf("the applications CA %q is not over the owner's key", ca.Subject.CommonName)
	case !ca.IsCA || !ca.MaxPathLenZero || !slices.Equal(ca.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}):
		return fmt.Errorf("the applications CA %q is not a CA for client certificates only, one level deep", ca.Subject.CommonName)
	}
	if err := pki.SignedBy(ca, ca); err != nil {
		return fmt.Errorf("the applications CA %q is not signed by the owner's key: %w", ca.Subject.CommonName, err)
	}
	return nil
}
