package metrics

import (
	"bytes"
	"crypto"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/borough-os/borough/internal/pki"
)

// A metrics credential lets a scraper read every node's metrics and
// nothing else: a Prometheus server given the owner's certificate could
// reboot, update or reset the nodes. It is a client certificate the
// owner's key signs, in the organisation credentialOrg, valid for the time
// the owner gave it. It is signed by the owner, not by the cluster CA:
// etcd's ports accept what the CA signs, and a scraper is no member; and
// it needs no state on the nodes, which know their owner already. A
// credential is withdrawn by letting it expire, or at once by handing the
// cluster to a new owner (borough owner rotate), whose nodes then accept
// only what the new owner signs.

// credentialOrg marks a certificate as a metrics credential.
const credentialOrg = "Borough metrics"

// backdate covers clocks a little behind the owner's.
const backdate = 5 * time.Minute

// Mint makes a metrics credential named name, valid for ttl from now,
// signed by the owner's key.
func Mint(owner *x509.Certificate, ownerKey crypto.Signer, name string, ttl time.Duration, now time.Time) (*pki.Cert, error) {
	if name == "" {
		return nil, errors.New("a metrics credential needs a name")
	}
	if ttl <= 0 {
		return nil, fmt.Errorf("a metrics credential's lifetime must be positive, not %v", ttl)
	}
	cred, err := pki.SignClient(owner, ownerKey, pkix.Name{CommonName: name, Organization: []string{credentialOrg}}, now.Add(-backdate), now.Add(ttl))
	if err != nil {
		return nil, fmt.Errorf("the metrics credential: %w", err)
	}
	return cred, nil
}

// CheckCredential says why c is not a metrics credential of owner valid at
// now, or nil if it is one.
func CheckCredential(c, owner *x509.Certificate, now time.Time) error {
	switch {
	case owner == nil:
		return errors.New("the node knows no owner to check a metrics credential against")
	case !slices.Equal(c.Subject.Organization, []string{credentialOrg}):
		return fmt.Errorf("certificate %q is not a metrics credential", c.Subject.CommonName)
	case !bytes.Equal(c.RawIssuer, owner.RawSubject):
		return fmt.Errorf("metrics credential %q is not the owner's", c.Subject.CommonName)
	case now.Before(c.NotBefore) || now.After(c.NotAfter):
		return fmt.Errorf("metrics credential %q is valid from %s to %s, not now", c.Subject.CommonName,
			c.NotBefore.Format(time.RFC3339), c.NotAfter.Format(time.RFC3339))
	}
	if err := pki.SignedBy(c, owner); err != nil {
		return fmt.Errorf("metrics credential %q is not signed by the owner: %w", c.Subject.CommonName, err)
	}
	return nil
}
