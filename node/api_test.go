package main

import (
	"crypto/x509"
	"errors"
	"testing"
	"time"

	"github.com/borough-os/borough/internal/pki"
)

// TestLockedOwner plays the old owner against a locked node after a
// hand-over: the enrolment config on the ESP still names them, and only
// the record sealed to the new owner, or a ledger that checks out, says
// otherwise.
func TestLockedOwner(t *testing.T) {
	old, next := newOwner(t, "old"), newOwner(t, "next")
	older := errors.New("an older copy put back")
	for _, tc := range []struct {
		name     string
		enrolled *x509.Certificate
		sealed   string
		fresh    bool
		refused  error
		want     *x509.Certificate
	}{
		{"enrolled, no record read yet", old, "", false, nil, old},
		{"enrolled, record sealed to the same owner", old, pki.Fingerprint(old), false, nil, old},
		{"handed over: record sealed to the next owner", old, pki.Fingerprint(next), false, nil, nil},
		{"an older ESP put back", old, "", false, older, nil},
		{"an older ESP put back, record read anyway", old, pki.Fingerprint(old), false, older, nil},
		{"no enrolment", nil, "", false, nil, nil},
		{"reset: no volume, its ledger erased", old, "", true, errors.New("no ledger"), old},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := lockedOwner(tc.enrolled, tc.sealed, tc.fresh, tc.refused); got != tc.want {
				t.Errorf("got %v, want %v", subject(got), subject(tc.want))
			}
		})
	}
}

func subject(c *x509.Certificate) string {
	if c == nil {
		return "nobody"
	}
	return c.Subject.CommonName
}

// newOwner is an owner's certificate named name.
func newOwner(t *testing.T, name string) *x509.Certificate {
	t.Helper()
	c, err := pki.NewOwner(name, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return c.Cert
}
