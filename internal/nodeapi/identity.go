package nodeapi

import (
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"regexp"
	"time"

	"github.com/borough-os/borough/internal/pki"
)

// A node without a certificate of a cluster (its first boot, a reset, a
// failed join) presents a certificate of its own key, made for this boot.
// Nobody could check a certificate nobody signed, and that node is the
// one the owner sends secrets to: a join ticket, a backup. So the node
// prints its key's fingerprint on its console (NodeKey), and the owner's
// client sends nothing to a node that is not checked against it or
// against the cluster CA (Client.NodeKey): whoever else answers at the
// node's address gets nothing.

// selfSigned makes the certificate a node presents before it has one of
// a cluster.
func selfSigned(now time.Time) (*tls.Certificate, error) {
	ca, err := pki.NewCA("borough node without a cluster", now)
	if err != nil {
		return nil, fmt.Errorf("node API: a self-signed certificate: %w", err)
	}
	return &tls.Certificate{Certificate: [][]byte{ca.Cert.Raw}, PrivateKey: ca.Key, Leaf: ca.Cert}, nil
}

// own returns the node's own certificate, made once, when first needed:
// most boots never need it, and making its key costs a boot under
// emulation (docs/decisions.md, "The node's own key, made when asked").
func (s *Server) own() (*tls.Certificate, error) {
	s.ownOnce.Do(func() { s.ownCert, s.ownErr = selfSigned(time.Now()) })
	return s.ownCert, s.ownErr
}

// NodeKey is the fingerprint of the key the node presents until it has
// a certificate of a cluster: for its console, whence the owner reads it.
func (s *Server) NodeKey() (string, error) {
	c, err := s.own()
	if err != nil {
		return "", err
	}
	return keyFingerprint(c.Leaf.RawSubjectPublicKeyInfo), nil
}

// keyFingerprint names a public key (its SubjectPublicKeyInfo) as
// "sha256:HEX".
func keyFingerprint(spki []byte) string {
	return "sha256:" + hex.EncodeToString(pki.KeyHashOf(spki))
}

var nodeKeyPattern = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// CheckNodeKey says what is wrong with a node key fingerprint given by
// hand, if anything.
func CheckNodeKey(fp string) error {
	if !nodeKeyPattern.MatchString(fp) {
		return fmt.Errorf("node key %q: want sha256: and 64 lower-case hex digits, as the node prints on its console", fp)
	}
	return nil
}
