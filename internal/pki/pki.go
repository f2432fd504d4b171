// Package pki is the cluster's certificate authority: it creates the CA
// at bootstrap, issues node certificates for etcd's peer and client ports,
// and signs certificate revocation lists.
//
// Keys are ECDSA P-256. The CA is valid for 20 years, node certificates
// for 10: a cluster must not stop because nobody rotated a certificate,
// and revocation (the CRL, which etcd checks on every peer handshake)
// is how a node is shut out. CRLs are DER: etcd fails every handshake
// on a PEM CRL (x509: malformed crl).
package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"time"
)

// CA is a certificate authority: its certificate and private key.
type CA struct {
	Cert *x509.Certificate
	Key  crypto.Signer
}

// Cert is an issued certificate with its key.
type Cert struct {
	Cert *x509.Certificate
	Key  crypto.Signer
}

// TLS is c as a key pair for crypto/tls.
func (c *Cert) TLS() tls.Certificate {
	return tls.Certificate{Certificate: [][]byte{c.Cert.Raw}, PrivateKey: c.Key, Leaf: c.Cert}
}

const (
	caValidity   = 20 * 365 * 24 * time.Hour
	certValidity = 10 * 365 * 24 * time.Hour
	// backdate covers clocks that are a little behind.
	backdate = time.Hour
)

// NewCA creates a CA named for the cluster.
func NewCA(cluster string, now time.Time) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          NewSerial(),
		Subject:               pkix.Name{CommonName: "Borough cluster CA " + cluster, Organization: []string{"Borough"}},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(caValidity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("creating CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key}, nil
}

// ParseCA parses a CA kept as its certificate and key, PEM.
func ParseCA(certPEM, keyPEM []byte) (*CA, error) {
	cert, err := ParseCertPEM(certPEM)
	if err != nil {
		return nil, fmt.Errorf("the CA certificate: %w", err)
	}
	key, err := ParseKeyPEM(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("the CA key: %w", err)
	}
	return &CA{Cert: cert, Key: key}, nil
}

// Issue issues a certificate for a node, good for TLS servers and clients,
// with the given IP and DNS subject alternative names.
func (ca *CA) Issue(name string, ips []net.IP, dns []string, now time.Time) (*Cert, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	cert, err := ca.sign(name, &key.PublicKey, ips, dns, now)
	if err != nil {
		return nil, err
	}
	return &Cert{Cert: cert, Key: key}, nil
}

// NewOwner makes an owner's identity: a self-signed client certificate
// and its key. It is a leaf, not a CA: clusters put it among their trusted
// roots, and a CA there could vouch for any certificate it signs.
func NewOwner(name string, now time.Time) (*Cert, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          NewSerial(),
		Subject:               pkix.Name{CommonName: name, Organization: []string{"Borough owner"}},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.AddDate(10, 0, 0),
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("creating the owner certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &Cert{Cert: cert, Key: key}, nil
}

// SignClient makes a client certificate for subject, valid from from until
// until, signed by parent's key (which need not be a CA's: the caller
// checks the signature itself, as x509 would refuse it).
func SignClient(parent *x509.Certificate, parentKey crypto.Signer, subject pkix.Name, from, until time.Time) (*Cert, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: NewSerial(),
		Subject:      subject,
		NotBefore:    from,
		NotAfter:     until,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		return nil, fmt.Errorf("signing a certificate for %q: %w", subject.CommonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &Cert{Cert: cert, Key: key}, nil
}

// SignedBy checks that signer's key signed c. signer need not be a CA:
// x509's CheckSignatureFrom asks for one, and the owner's certificate,
// which signs metrics credentials and its own applications CA, is a leaf.
func SignedBy(c, signer *x509.Certificate) error {
	return signer.CheckSignature(c.SignatureAlgorithm, c.RawTBSCertificate, c.Signature)
}

// CRL returns a DER revocation list revoking serials, numbered number,
// with extensions ext.
func (ca *CA) CRL(number int64, revoked []*big.Int, now time.Time, ext ...pkix.Extension) ([]byte, error) {
	var entries []x509.RevocationListEntry
	for _, s := range revoked {
		entries = append(entries, x509.RevocationListEntry{SerialNumber: s, RevocationTime: now})
	}
	return x509.CreateRevocationList(rand.Reader, &x509.RevocationList{
		Number:                    big.NewInt(number),
		ThisUpdate:                now.Add(-backdate),
		NextUpdate:                now.Add(certValidity),
		RevokedCertificateEntries: entries,
		ExtraExtensions:           ext,
	}, ca.Cert, ca.Key)
}

// Fingerprint is the SHA-256 of a certificate's DER, as "sha256:HEX". The
// owner pins the cluster CA by it.
func Fingerprint(c *x509.Certificate) string {
	sum := sha256.Sum256(c.Raw)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// KeyHash is the SHA-256 of a certificate's public key (its
// SubjectPublicKeyInfo): what names a node's key, whatever certificate
// carries it.
func KeyHash(c *x509.Certificate) []byte {
	return KeyHashOf(c.RawSubjectPublicKeyInfo)
}

// KeyHashOf is the SHA-256 of a DER SubjectPublicKeyInfo.
func KeyHashOf(spki []byte) []byte {
	sum := sha256.Sum256(spki)
	return sum[:]
}

// NewSerial is a random certificate serial number.
func NewSerial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return n
}

// CertPEM encodes a certificate as PEM.
func CertPEM(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
}

// KeyPEM encodes a private key as PKCS #8 PEM.
func KeyPEM(k crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// ParseCertPEM parses the first certificate in PEM data.
func ParseCertPEM(b []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New("no PEM certificate")
	}
	return x509.ParseCertificate(block.Bytes)
}

// ReadCertPEM reads the first certificate in the PEM file at path; an
// error names the file, and a missing one is os.ErrNotExist.
func ReadCertPEM(path string) (*x509.Certificate, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	c, err := ParseCertPEM(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// ParseKeyPEM parses a PKCS #8 PEM private key.
func ParseKeyPEM(b []byte) (crypto.Signer, error) {
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "PRIVATE KEY" {
		return nil, errors.New("no PEM private key")
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, err
	}
	s, ok := k.(crypto.Signer)
	if !ok {
		return nil, errors.New("private key cannot sign")
	}
	return s, nil
}
