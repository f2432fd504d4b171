package authority

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/borough-os/borough/internal/pki"
	"github.com/borough-os/borough/proto/authoritypb"
)

// TestRevocations tries CRLs a member could sign with the CA key every
// member holds: only one carrying the owner's revocations of its number
// and exactly its serials passes, and a removed node stays revoked under
// any certificate.
func TestRevocations(t *testing.T) {
	now := time.Now()
	ca, err := pki.NewCA("prod", now)
	if err != nil {
		t.Fatal(err)
	}
	owner, err := pki.NewOwner("owner", now)
	if err != nil {
		t.Fatal(err)
	}
	impostor, err := pki.NewOwner("owner", now)
	if err != nil {
		t.Fatal(err)
	}
	removed, err := ca.Issue("node-00000001", []net.IP{net.IPv4(10, 0, 0, 1)}, nil, now)
	if err != nil {
		t.Fatal(err)
	}
	serial := removed.Cert.SerialNumber
	// crl is CRL number revoking serials, carrying signer's revocations
	// r (none if signer is nil) in ext (or ext itself if set).
	crl := func(number int64, serials []*big.Int, signer *pki.Cert, r *authoritypb.Revocations, ext *pkix.Extension) *x509.RevocationList {
		var exts []pkix.Extension
		if signer != nil {
			stmt, err := Sign(signer.Cert, signer.Key, KindRevocations, r)
			if err != nil {
				t.Fatal(err)
			}
			e, err := CRLExtension(stmt)
			if err != nil {
				t.Fatal(err)
			}
			exts = append(exts, e)
		}
		if ext != nil {
			exts = append(exts, *ext)
		}
		der, err := ca.CRL(number, serials, now, exts...)
		if err != nil {
			t.Fatal(err)
		}
		l, err := x509.ParseRevocationList(der)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	owners := &authoritypb.Revocations{Cluster: "prod", Number: 2, Nodes: []string{"node-00000001"}, Serials: []string{serial.Text(16)}}
	revokes := []*big.Int{serial}
	for _, tc := range []struct {
		name string
		crl  *x509.RevocationList
		// err is what Revocations says, "" if it accepts.
		err   string
		nodes []string
	}{
		{"the owner's", crl(2, revokes, owner, owners, nil), "", owners.Nodes},
		{"none carried", crl(2, revokes, nil, nil, nil), "", nil},
		{"another number", crl(3, revokes, owner, owners, nil), "the CRL is number 3, the owner's revocations number 2", owners.Nodes},
		{"other serials", crl(2, nil, owner, owners, nil), "CRL number 2 revokes [], the owner revoked", owners.Nodes},
		{"an impostor's", crl(2, revokes, impostor, owners, nil), ErrSigner.Error(), owners.Nodes},
		{"malformed", crl(2, revokes, nil, nil, &pkix.Extension{Id: RevocationsExtension, Value: []byte{1, 2}}), "malformed revocations extension", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Revocations(tc.crl, owner.Cert)
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("Revocations: %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("Revocations = %v, %v; want an error saying %q", r, err, tc.err)
			case tc.err == "" && (r == nil) != (tc.nodes == nil):
				t.Fatalf("Revocations = %v, want nodes %v", r, tc.nodes)
			}
			if tc.err != "" && strings.Contains(tc.err, "malformed") {
				if _, err := RemovedNodes(tc.crl); !errors.Is(err, ErrDamaged) {
					t.Errorf("RemovedNodes = %v, want %v", err, ErrDamaged)
				}
				return
			}
			if got, err := RemovedNodes(tc.crl); err != nil || strings.Join(got, ",") != strings.Join(tc.nodes, ",") {
				t.Errorf("RemovedNodes = %v, %v; want %v", got, err, tc.nodes)
			}
		})
	}

	// A new certificate a member signed for the removed node, and one for
	// a node the owner did not remove.
	again, err := ca.Issue("node-00000001", []net.IP{net.IPv4(10, 0, 0, 1)}, nil, now)
	if err != nil {
		t.Fatal(err)
	}
	member, err := ca.Issue("node-00000002", []net.IP{net.IPv4(10, 0, 0, 2)}, nil, now)
	if err != nil {
		t.Fatal(err)
	}
	inForce := crl(2, revokes, owner, owners, nil)
	for _, tc := range []struct {
		name string
		cert *x509.Certificate
		want string
	}{
		{"the removed node's certificate", removed.Cert, "is revoked"},
		{"a new certificate in its name", again.Cert, "the owner removed node node-00000001"},
		{"a member's", member.Cert, ""},
	} {
		if got := Revokes(inForce, tc.cert); (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("Revokes(%s) = %q, want %q", tc.name, got, tc.want)
		}
	}
}
