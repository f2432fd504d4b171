package cluster

import (
	"crypto/tls"
	"errors"
	"fmt"
	"os"

	"github.com/borough-os/borough/internal/pki"
)

// Status is what the manager tells the node API about the node.
type Status struct {
	State State
	// Failure is why the node is Failed.
	Failure string
	// Cluster and Member are the node's cluster and name, once known.
	Cluster, Member string
}

// Status returns the node's state and, once known, its names.
func (mg *Manager) Status() Status {
	state, failure := mg.m.current()
	mg.m.mu.Lock()
	defer mg.m.mu.Unlock()
	return Status{State: state, Failure: failure, Cluster: mg.names.Cluster, Member: mg.names.Node}
}

// setNames records the node's names for Status.
func (mg *Manager) setNames(rec *Record) {
	mg.m.mu.Lock()
	defer mg.m.mu.Unlock()
	mg.names = *rec
}

// ErrNoIdentity says the node has no certificate of a cluster yet.
var ErrNoIdentity = errors.New("the node has no certificate of a cluster yet")

// Identity returns the node's certificate, chained to its cluster CA, as
// its own services present it to the owner. Before the node has one
// (Failed before it joined) it returns ErrNoIdentity.
func (mg *Manager) Identity() (*tls.Certificate, error) {
	if mg.cfg.DataRoot == "" {
		return nil, ErrNoIdentity
	}
	files := mg.pkiFiles()
	cert, err := tls.LoadX509KeyPair(files.Cert(), files.Key())
	if errors.Is(err, os.ErrNotExist) {
		return nil, ErrNoIdentity
	}
	if err != nil {
		return nil, fmt.Errorf("the node's certificate: %w", err)
	}
	b, err := os.ReadFile(files.CA())
	if err != nil {
		return nil, fmt.Errorf("the cluster CA: %w", err)
	}
	ca, err := pki.ParseCertPEM(b)
	if err != nil {
		return nil, fmt.Errorf("the cluster CA: %w", err)
	}
	cert.Certificate = append(cert.Certificate, ca.Raw)
	return &cert, nil
}
