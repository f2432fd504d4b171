package clusterkey

import (
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/borough-os/borough/internal/authority"
	"github.com/borough-os/borough/internal/keyspace"
	"github.com/borough-os/borough/internal/pki"
	"github.com/borough-os/borough/internal/ticket"
	"github.com/borough-os/borough/internal/unlock"
	"github.com/borough-os/borough/proto/authoritypb"
)

// TestCheckEscrowKey tries what a member that holds the CA's key and
// writes etcd would publish as another node's escrow key: each is
// refused, so no peer seals that node's shares to a key of the rogue's.
func TestCheckEscrowKey(t *testing.T) {
	now := time.Now()
	ca, err := pki.NewCA("prod", now)
	if err != nil {
		t.Fatal(err)
	}
	owner, err := pki.NewOwner("owner", now)
	if err != nil {
		t.Fatal(err)
	}
	const node = "node-00000002"
	identity := func(name string) *unlock.Identity {
		c, err := ca.Issue(name, nil, []string{name}, now)
		if err != nil {
			t.Fatal(err)
		}
		return &unlock.Identity{Cert: tls.Certificate{Certificate: [][]byte{c.Cert.Raw}, PrivateKey: c.Key, Leaf: c.Cert}, CA: ca.Cert}
	}
	admit := func(name string, id *unlock.Identity) []byte {
		tk, rec, err := ticket.Mint(ticket.Params{Cluster: "prod", CAFingerprint: pki.Fingerprint(ca.Cert), Endpoints: []string{"10.0.0.1:7834"}}, now)
		if err != nil {
			t.Fatal(err)
		}
		stmt, err := authority.Sign(owner.Cert, owner.Key, authority.KindTicket, &authoritypb.Ticket{
			Cluster: "prod", Id: tk.GetId(), Expires: rec.GetExpires(), ClaimKey: rec.GetClaimKey()})
		if err != nil {
			t.Fatal(err)
		}
		a, err := ticket.NewAdmission(stmt, ticket.Prove(tk, name, pki.KeyHash(id.Cert.Leaf)))
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	publish := func(id *unlock.Identity, pub, admission []byte) []byte {
		b, err := keyspace.SignEscrowKey(id.Cert.PrivateKey.(crypto.Signer), id.Cert.Certificate[0], "prod", node, pub, admission)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	edit := func(b []byte, f func(*keyspace.EscrowKey)) []byte {
		var r keyspace.EscrowKey
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatal(err)
		}
		f(&r)
		out, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	honest, forged, rogue := identity(node), identity(node), identity("node-00000003")
	pub, mine := make([]byte, 32), make([]byte, 32)
	mine[0] = 1
	good := publish(honest, pub, admit(node, honest))
	revoked, err := ca.CRL(2, []*big.Int{honest.Cert.Leaf.SerialNumber}, now)
	if err != nil {
		t.Fatal(err)
	}
	revokedCRL, err := x509.ParseRevocationList(revoked)
	if err != nil {
		t.Fatal(err)
	}
	noCRL := func() (*x509.RevocationList, error) { return nil, nil }
	withOwner := trust{cluster: "prod", id: unlock.Identity{CA: ca.Cert, CRL: noCRL}, owner: owner.Cert}
	for _, tc := range []struct {
		name   string
		record []byte
		trust  trust
		want   string
	}{
		{"the node's own", good, withOwner, ""},
		{"the node's own, without an owner", publish(honest, pub, nil), trust{cluster: "prod", id: unlock.Identity{CA: ca.Cert, CRL: noCRL}}, ""},
		{"damaged", []byte("{"), withOwner, "damaged"},
		{"the node's, with the rogue's key in it", edit(good, func(r *keyspace.EscrowKey) { r.Key = mine }), withOwner, "does not verify"},
		{"a certificate minted in the node's name, no admission", publish(forged, mine, nil), withOwner, "no admission"},
		{"a certificate minted in the node's name, with the node's admission", publish(forged, mine, admit(node, honest)), withOwner, "another key"},
		{"the rogue's own certificate", publish(rogue, mine, admit("node-00000003", rogue)), withOwner, "names node-00000003"},
		{"the node's, revoked", good, trust{cluster: "prod", owner: owner.Cert,
			id: unlock.Identity{CA: ca.Cert, CRL: func() (*x509.RevocationList, error) { return revokedCRL, nil }}}, "revoked"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := checkEscrowKey(tc.record, tc.trust, node)
			if tc.want == "" {
				if err != nil || string(r.Key) != string(pub) {
					t.Fatalf("checkEscrowKey = %v, %v; want the node's key", r, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("checkEscrowKey = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
