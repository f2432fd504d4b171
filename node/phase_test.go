package main

import (
	"errors"
	"testing"

	"github.com/borough-os/borough/internal/cluster"
	"github.com/borough-os/borough/internal/enrolment"
)

// TestEarlyPhase: a node that has not reached its keys or its manager
// (it failed before its storage, or still mounts it) answers the node
// API's questions about them: its enrolment's owner, no member identity,
// no admission, no identity on its ESP, no sealed owner.
func TestEarlyPhase(t *testing.T) {
	owner := newOwner(t, "owner")
	for _, tc := range []struct {
		name string
		p    *phase
	}{
		{"enrolment read", &phase{enrolment: &enrolment.Enrolment{Owner: owner}}},
		{"volume mounted, no manager yet", (&phase{enrolment: &enrolment.Enrolment{Owner: owner}}).next(func(p *phase) { p.mounted = true })},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.p.owner(false, nil); got != owner {
				t.Errorf("owner = %v, want the enrolment's", subject(got))
			}
			if _, err := tc.p.memberIdentity(); !errors.Is(err, cluster.ErrNoIdentity) {
				t.Errorf("memberIdentity = %v, want %v", err, cluster.ErrNoIdentity)
			}
			if _, err := tc.p.lockedIdentity(); err == nil {
				t.Error("lockedIdentity without a keeper gives one")
			}
			if a, s := tc.p.admission(), tc.p.sealedOwner(); a != nil || s != "" {
				t.Errorf("admission %x, sealed owner %q: want none", a, s)
			}
		})
	}
}
