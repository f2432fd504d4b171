package main

import (
	"crypto/tls"
	"crypto/x509"

	"github.com/borough-os/borough/internal/cluster"
	"github.com/borough-os/borough/internal/clusterkey"
	"github.com/borough-os/borough/internal/enrolment"
)

// phase is how far bring-up has come, as the node API sees it: one value,
// replaced whole at each step, so that each answer reads one consistent
// state. A part that is nil is a step not reached yet, and the methods
// below say what the node answers then.
type phase struct {
	// enrolment is the config in force: Load's until the data volume
	// confirms it (until then provisional, and the API acts on nothing
	// but the owner's unlock), then the volume's.
	enrolment *enrolment.Enrolment
	// keys is the keeper of the node's cluster unlock key, from the
	// moment bring-up waits for it (locked): while the volume is locked,
	// the API presents the node's identity on the ESP and takes the
	// owner's unlock.
	keys *clusterkey.Keeper
	// mounted says the data volume is mounted.
	mounted bool
	// mgr is the cluster manager, once the volume is mounted.
	mgr *cluster.Manager
}

// next returns p with what changed, for bring-up to store.
func (p phase) next(change func(*phase)) *phase {
	change(&p)
	return &p
}

// owner is the owner the node API takes: the data volume's, or while it
// is locked lockedOwner's. fresh says the node has no data volume yet;
// refused is why the ESP's ledger was refused, if it was.
func (p *phase) owner(fresh bool, refused error) *x509.Certificate {
	if p.mgr != nil {
		if o := p.mgr.Owner(); o != nil {
			return o
		}
	}
	return lockedOwner(p.enrolment.Owner, p.sealedOwner(), fresh, refused)
}

// sealedOwner is the fingerprint of the owner a locked node's keys are
// sealed to, or "".
func (p *phase) sealedOwner() string {
	if p.keys == nil {
		return ""
	}
	return p.keys.SealedOwner()
}

// memberIdentity is the node's certificate of its cluster, as a member.
func (p *phase) memberIdentity() (*tls.Certificate, error) {
	if p.mgr == nil {
		return nil, cluster.ErrNoIdentity
	}
	return p.mgr.Identity()
}

// admission is the node's admission by its owner, nil while it has none.
func (p *phase) admission() []byte {
	if p.mgr == nil {
		return nil
	}
	return p.mgr.Admission()
}

// lockedIdentity is the identity on the ESP a locked node presents.
func (p *phase) lockedIdentity() (*tls.Certificate, error) {
	if p.keys == nil {
		return nil, cluster.ErrNoIdentity
	}
	return p.keys.Identity()
}
