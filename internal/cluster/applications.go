package cluster

import (
	"context"
	"errors"

	"github.com/borough-os/borough/internal/authority"
	"github.com/borough-os/borough/internal/consensus"
	"github.com/borough-os/borough/internal/keyspace"
	"github.com/borough-os/borough/internal/nodestate"
	"github.com/borough-os/borough/internal/pki"
)

// errApplications ends the member's services once its client port is to
// trust the owner's applications CA: etcd reads what its client port
// trusts only when it starts (serveRestarting).
var errApplications = errors.New("the owner's applications CA is new to this member: etcd restarts to trust it on its client port")

// trustApplications makes the client port trust the owner's applications
// CA (keyspace.ApplicationsCA; `borough cluster credential`) as soon as
// etcd holds one over the node's owner's key, etcd restarting in the
// node's turn; one that is not (any member could write it) is passed
// over, saying why.
func (m *Member) trustApplications(ctx context.Context, c *consensus.Consensus, rec *nodestate.Record) error {
	return m.retrust(ctx, c, rec, trustChange{
		what: "the owner's applications CA", why: errApplications, key: keyspace.ApplicationsCA,
		take: func(ctx context.Context) (bool, error) { return m.takeApplicationsCA(ctx, c) },
	})
}

// takeApplicationsCA trusts the applications CA etcd holds, if it is the
// owner's, and says whether that changed what the client port trusts.
func (m *Member) takeApplicationsCA(ctx context.Context, c *consensus.Consensus) (bool, error) {
	resp, err := c.Client.Get(ctx, keyspace.ApplicationsCA)
	if err != nil || len(resp.Kvs) == 0 {
		return false, err
	}
	m.trustMu.Lock()
	defer m.trustMu.Unlock()
	f := m.pkiFiles()
	owner, err := f.LoadOwner()
	if err != nil {
		return false, err
	}
	ca, err := pki.ParseCertPEM(resp.Kvs[0].Value)
	if err == nil {
		err = authority.CheckApplicationsCA(ca, owner)
	}
	if err != nil {
		m.log.Warn("refused an applications CA", "owner", pki.Fingerprint(owner), "err", err)
		return false, nil
	}
	changed, err := f.TrustApplications(ca)
	if changed {
		m.log.Info("the client port trusts the owner's applications CA", "ca", pki.Fingerprint(ca))
	}
	return changed, err
}
