package pki

import (
	"bytes"
	"crypto"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"regexp"
	"slices"
	"time"
)

// nodeName is the form of a node's name, which is its certificate's
// common name and DNS name and its etcd member name.
var nodeName = regexp.MustCompile(`^node-[0-9a-f]{8}$`)

// IsNodeName says whether s has the form of a node's name.
func IsNodeName(s string) bool { return nodeName.MatchString(s) }

// clusterName is the form of a cluster's name, which goes into etcd's
// flags, certificates and DNS-like names: characters of a-z, 0-9 and '-',
// starting with a letter. Its length is IsClusterName's to check: a
// counted repetition would compile into a program of that many copies,
// which costs every boot tens of milliseconds under emulation.
var clusterName = regexp.MustCompile(`^[a-z][a-z0-9-]*$`)

// maxClusterName is the longest cluster name: a DNS label.
const maxClusterName = 63

// IsClusterName says whether s is a cluster's name: 1 to 63 characters
// of a-z, 0-9 and '-', starting with a letter.
func IsClusterName(s string) bool { return len(s) <= maxClusterName && clusterName.MatchString(s) }

// NewCSR makes a certificate request for a node named name, reached at
// ips (the first is the one it advertises to its peers), signed by key.
// The key never leaves the node.
func NewCSR(name string, ips []net.IP, key crypto.Signer) ([]byte, error) {
	return x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject:     pkix.Name{CommonName: name, Organization: []string{"Borough"}},
		IPAddresses: ips,
		DNSNames:    []string{name, "localhost"},
	}, key)
}

// SignCSR checks a node's certificate request and issues the node its
// certificate, with the request's name and IP addresses: the request's
// signature must verify, its name must be a node name and its key ECDSA
// P-256 (the cluster's one key type). at is the address the cluster sees
// the node at (a join's source address): the request must name it, and
// may name no other but loopback, so that a joiner cannot have a
// certificate for another node's address.
func (ca *CA) SignCSR(der []byte, at netip.Addr, now time.Time) (*x509.Certificate, error) {
	csr, err := x509.ParseCertificateRequest(der)
	if err != nil {
		return nil, fmt.Errorf("parsing the certificate request: %w", err)
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, fmt.Errorf("the certificate request's signature: %w", err)
	}
	name := csr.Subject.CommonName
	if !IsNodeName(name) {
		return nil, fmt.Errorf("the certificate request names %q, not a node name like node-1a2b3c4d", name)
	}
	if csr.PublicKeyAlgorithm != x509.ECDSA {
		return nil, errors.New("the certificate request's key is not ECDSA P-256")
	}
	if len(csr.IPAddresses) == 0 {
		return nil, errors.New("the certificate request has no IP address")
	}
	if err := CheckAddresses(csr, at); err != nil {
		return nil, err
	}
	return ca.sign(name, csr.PublicKey, csr.IPAddresses, []string{name, "localhost"}, now)
}

// CheckAddresses checks that a node's certificate request names at, the
// address the cluster sees the node at, and no other but loopback.
func CheckAddresses(csr *x509.CertificateRequest, at netip.Addr) error {
	at = at.Unmap()
	named := false
	for _, ip := range csr.IPAddresses {
		a, _ := netip.AddrFromSlice(ip)
		a = a.Unmap()
		switch {
		case a == at:
			named = true
		case !a.IsLoopback():
			return fmt.Errorf("the certificate request names %s, but the node is at %s: a node's certificate names "+
				"only its own address (and loopback)", a, at)
		}
	}
	if !named {
		return fmt.Errorf("the certificate request does not name %s, the address the node is at", at)
	}
	return nil
}

// sign issues a node certificate for pub.
func (ca *CA) sign(name string, pub any, ips []net.IP, dns []string, now time.Time) (*x509.Certificate, error) {
	tmpl := &x509.Certificate{
		SerialNumber:          NewSerial(),
		Subject:               pkix.Name{CommonName: name, Organization: []string{"Borough"}},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(certValidity),
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses:           ips,
		DNSNames:              dns,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, pub, ca.Key)
	if err != nil {
		return nil, fmt.Errorf("issuing certificate for %s: %w", name, err)
	}
	return x509.ParseCertificate(der)
}

// CheckCRL checks a DER CRL before it is put in force: the CA signed it,
// and it is newer (a higher number) than current, if there is one.
func CheckCRL(der []byte, ca *x509.Certificate, current *x509.RevocationList) error {
	crl, err := x509.ParseRevocationList(der)
	if err != nil {
		return fmt.Errorf("the CRL is not a DER revocation list: %w", err)
	}
	if !bytes.Equal(crl.RawIssuer, ca.RawSubject) {
		return errors.New("the CRL is not issued by the cluster CA")
	}
	if err := crl.CheckSignatureFrom(ca); err != nil {
		return fmt.Errorf("the CRL's signature does not verify against the cluster CA: %w", err)
	}
	if crl.Number == nil {
		return errors.New("the CRL has no number")
	}
	if current == nil || current.Number == nil {
		return nil
	}
	switch c := crl.Number.Cmp(current.Number); {
	case c < 0:
		return fmt.Errorf("the CRL is number %v, older than the one in force (%v)", crl.Number, current.Number)
	case c == 0 && !bytes.Equal(der, current.Raw):
		return fmt.Errorf("the CRL is number %v, as the one in force, but differs from it", crl.Number)
	}
	return nil
}

// VerifyPinned checks a server's chain against the CA with the given
// fingerprint (trust pinned out of band: a ticket, the node's console):
// the CA must be in the chain, and the server's certificate must verify
// against it alone, for host. It returns the CA.
func VerifyPinned(chain []*x509.Certificate, fingerprint, host string) (*x509.Certificate, error) {
	if len(chain) == 0 {
		return nil, errors.New("the server presented no certificate")
	}
	for _, c := range chain {
		if !c.IsCA || Fingerprint(c) != fingerprint {
			continue
		}
		roots := x509.NewCertPool()
		roots.AddCert(c)
		if _, err := chain[0].Verify(x509.VerifyOptions{Roots: roots, DNSName: host}); err != nil {
			return nil, fmt.Errorf("the server's certificate does not verify against the CA %s: %w", fingerprint, err)
		}
		return c, nil
	}
	return nil, fmt.Errorf("the server does not present the CA %s: it is not a member of that cluster, or the fingerprint is mistyped", fingerprint)
}

// ParseCRL parses a DER CRL and checks that ca signed it.
func ParseCRL(der []byte, ca *x509.Certificate) (*x509.RevocationList, error) {
	if err := CheckCRL(der, ca, nil); err != nil {
		return nil, err
	}
	return x509.ParseRevocationList(der)
}

// Revoke returns the CRL that follows current with serials added (each
// kept once), numbered one higher.
func (ca *CA) Revoke(current *x509.RevocationList, serials []*big.Int, now time.Time) ([]byte, error) {
	number, revoked := Next(current, serials)
	return ca.CRL(number, revoked, now)
}

// Next is the number and the revoked serials of the CRL that follows
// current with serials added (each kept once).
func Next(current *x509.RevocationList, serials []*big.Int) (int64, []*big.Int) {
	seen := map[string]bool{}
	var revoked []*big.Int
	for _, s := range serials {
		if !seen[s.String()] {
			seen[s.String()] = true
			revoked = append(revoked, s)
		}
	}
	for _, e := range current.RevokedCertificateEntries {
		if !seen[e.SerialNumber.String()] {
			seen[e.SerialNumber.String()] = true
			revoked = append(revoked, e.SerialNumber)
		}
	}
	return new(big.Int).Add(current.Number, big.NewInt(1)).Int64(), revoked
}

// Hex are serials in hex, sorted, as RevokedSerials gives them.
func Hex(serials []*big.Int) []string {
	out := make([]string, 0, len(serials))
	for _, s := range serials {
		out = append(out, s.Text(16))
	}
	slices.Sort(out)
	return out
}

// RevokedSerials are the serial numbers crl revokes, hex, sorted.
func RevokedSerials(crl *x509.RevocationList) []string {
	var serials []*big.Int
	for _, e := range crl.RevokedCertificateEntries {
		serials = append(serials, e.SerialNumber)
	}
	return Hex(serials)
}
