package cluster

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// Owner returns the owner's certificate the cluster gave this node when it
// joined, or made it with (it is on the data volume). It is nil for a
// cluster without an owner.
func (l *local) Owner() *x509.Certificate {
	owner, err := l.pkiFiles().LoadOwner()
	if err != nil {
		l.log.Warn("the owner's certificate on the data volume", "error", err)
	}
	return owner
}

// ErrNoIdentity says the node has no certificate of a cluster yet.
var ErrNoIdentity = errors.New("the node has no certificate of a cluster yet")

// Admission returns the node's admission by its owner, as its own
// services show it with its certificate; nil while it has none (a node
// without an owner, or one that has not joined).
func (l *local) Admission() []byte {
	b, err := os.ReadFile(l.pkiFiles().Admission())
	if err != nil {
		return nil
	}
	return b
}

// Identity returns the node's certificate, chained to its cluster CA, as
// its own services present it to the owner. Before the node has one
// (Failed before it joined) it returns ErrNoIdentity.
func (l *local) Identity() (*tls.Certificate, error) {
	cert, err := l.pkiFiles().LoadIdentity()
	if errors.Is(err, os.ErrNotExist) {
		return nil, ErrNoIdentity
	}
	if err != nil {
		return nil, fmt.Errorf("the node's certificate: %w", err)
	}
	return cert, nil
}
