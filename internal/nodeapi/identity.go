package nodeapi

import (
	"crypto/tls"
	"fmt"
	"time"

	"github.com/borough-os/borough/internal/pki"
)

// selfSigned is the certificate a node presents before it has one of a
// cluster: made when first needed, known to nobody, so the owner's client
// can read such a node only unverified (Client.Unverified).
func selfSigned(now time.Time) (*tls.Certificate, error) {
	ca, err := pki.NewCA("borough node without a cluster", now)
	if err != nil {
		return nil, fmt.Errorf("node API: a self-signed certificate: %w", err)
	}
	return &tls.Certificate{Certificate: [][]byte{ca.Cert.Raw}, PrivateKey: ca.Key, Leaf: ca.Cert}, nil
}
