package admin

import (
	"context"
	"crypto/tls"
	"crypto/x509/pkix"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/borough-os/borough/internal/keyspace"
	"github.com/borough-os/borough/internal/pki"
)

// An owner session is etcd's root for a few hours, for the tools that
// read their key from a file (etcdctl): a fresh key and a certificate of
// the owner's applications CA (authority.NewApplicationsCA) in the
// owner's own name, which etcd takes as the owner's user. The owner's key
// never lies in clear on the owner's disk; a session's file, taken, is
// worth hours, and nobody can use it to hand the cluster over or sign for
// the owner. A session is not recorded in the cluster: it ends when it
// expires, or at once when the cluster is handed to a new owner.

// sessionOrg marks a certificate as an owner session.
const sessionOrg = "Borough owner session"

// MintSession makes an owner session valid for ttl from now, in the
// cluster c reaches as its owner. If the cluster has no applications CA
// of this owner's yet, it stores it, which restarts each member's etcd in
// its turn, and says so (fresh): the session works once each endpoint
// trusts it.
func MintSession(ctx context.Context, c *clientv3.Client, owner tls.Certificate, ttl time.Duration, now time.Time) (cert *pki.Cert, fresh bool, err error) {
	if ttl <= 0 {
		return nil, false, fmt.Errorf("an owner session's lifetime must be positive, not %v", ttl)
	}
	owner, err = withLeaf(owner)
	if err != nil {
		return nil, false, err
	}
	key, err := ownerSigner(owner)
	if err != nil {
		return nil, false, err
	}
	apps, stored, err := applicationsCA(ctx, c, owner.Leaf, key, now)
	if err != nil {
		return nil, false, err
	}
	cert, err = pki.SignClient(apps, key, pkix.Name{CommonName: owner.Leaf.Subject.CommonName, Organization: []string{sessionOrg}},
		now.Add(-5*time.Minute), now.Add(ttl))
	if err != nil {
		return nil, false, err
	}
	if !stored {
		if _, err := c.Put(ctx, keyspace.ApplicationsCA, string(pki.CertPEM(apps))); err != nil {
			return nil, false, fmt.Errorf("storing the applications CA: %w", err)
		}
	}
	return cert, !stored, nil
}
