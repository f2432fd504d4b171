package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/borough-os/borough/internal/keyspace"
	"github.com/borough-os/borough/internal/lifecycle"
	"github.com/borough-os/borough/internal/nodestate"
)

// started records the node's names and its member's client for Healthy.
func (mg *Manager) started(rec *nodestate.Record, c *clientv3.Client) {
	mg.life.Named(rec.Cluster, rec.Node)
	mg.clientMu.Lock()
	defer mg.clientMu.Unlock()
	mg.client = c
}

// Client is the running member's etcd client, nil until it runs: what
// the test build's rogue-member hook (node/rogue.go) acts through, as a
// member compromised while running would.
func (mg *Manager) Client() *clientv3.Client {
	mg.clientMu.Lock()
	defer mg.clientMu.Unlock()
	return mg.client
}

// Healthy checks that the node runs and its member reads through the
// cluster: a linearizable read, which takes a quorum. It is what an
// update's try boot waits for before it confirms itself.
func (mg *Manager) Healthy(ctx context.Context) error {
	state := mg.life.Status().State
	c := mg.Client()
	if state != lifecycle.Running || c == nil {
		return fmt.Errorf("the node is %s, not Running", state)
	}
	if _, err := c.Get(ctx, keyspace.Cluster); err != nil {
		return fmt.Errorf("a linearizable read: %w", err)
	}
	return nil
}

// Owner returns the owner's certificate the cluster gave this node when it
// joined, or made it with (it is on the data volume). It is nil for a
// cluster without an owner.
func (mg *Manager) Owner() *x509.Certificate {
	owner, err := mg.pkiFiles().LoadOwner()
	if err != nil {
		mg.log.Warn("the owner's certificate on the data volume", "error", err)
	}
	return owner
}

// ErrNoIdentity says the node has no certificate of a cluster yet.
var ErrNoIdentity = errors.New("the node has no certificate of a cluster yet")

// Admission returns the node's admission by its owner, as its own
// services show it with its certificate; nil while it has none (a node
// without an owner, or one that has not joined).
func (mg *Manager) Admission() []byte {
	b, err := os.ReadFile(mg.pkiFiles().Admission())
	if err != nil {
		return nil
	}
	return b
}

// Identity returns the node's certificate, chained to its cluster CA, as
// its own services present it to the owner. Before the node has one
// (Failed before it joined) it returns ErrNoIdentity.
func (mg *Manager) Identity() (*tls.Certificate, error) {
	cert, err := mg.pkiFiles().LoadIdentity()
	if errors.Is(err, os.ErrNotExist) {
		return nil, ErrNoIdentity
	}
	if err != nil {
		return nil, fmt.Errorf("the node's certificate: %w", err)
	}
	return cert, nil
}
