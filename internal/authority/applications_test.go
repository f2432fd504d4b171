package authority

import (
	"crypto/x509"
	"strings"
	"testing"
	"time"

	"github.com/borough-os/borough/internal/pki"
)

// TestCheckApplicationsCA tries what a member could put in etcd as the
// owner's applications CA.
func TestCheckApplicationsCA(t *testing.T) {
	now := time.Now()
	owner, err := pki.NewOwner("owner", now)
	if err != nil {
		t.Fatal(err)
	}
	other, err := pki.NewOwner("owner", now)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := NewApplicationsCA(owner.Cert, owner.Key, now)
	if err != nil {
		t.Fatal(err)
	}
	others, err := NewApplicationsCA(other.Cert, other.Key, now)
	if err != nil {
		t.Fatal(err)
	}
	// Over the owner's key, signed with another, as a member could.
	forged, err := NewApplicationsCA(owner.Cert, other.Key, now)
	if err != nil {
		t.Fatal(err)
	}
	cluster, err := pki.NewCA("unit", now)
	if err != nil {
		t.Fatal(err)
	}
	tampered := *ca
	tampered.Signature = append([]byte(nil), ca.Signature...)
	tampered.Signature[len(tampered.Signature)-1] ^= 1
	for _, tc := range []struct {
		name  string
		ca    *x509.Certificate
		owner *x509.Certificate
		err   string
	}{
		{"the owner's", ca, owner.Cert, ""},
		{"another owner's", others, owner.Cert, "not over the owner's key"},
		{"the owner's certificate itself", owner.Cert, owner.Cert, "is not an applications CA"},
		{"the cluster CA", cluster.Cert, owner.Cert, "is not an applications CA"},
		{"over the owner's key, signed with another", forged, owner.Cert, "not signed by the owner's key"},
		{"its signature changed", &tampered, owner.Cert, "not signed by the owner's key"},
		{"a cluster without an owner", ca, nil, "without an owner"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckApplicationsCA(tc.ca, tc.owner)
			if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("CheckApplicationsCA = %v, want %q", err, tc.err)
			}
		})
	}
}
