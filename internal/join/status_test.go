package join

import (
	"context"
	"crypto/tls"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/borough-os/borough/internal/authority"
	"github.com/borough-os/borough/internal/pki"
	"github.com/borough-os/borough/proto/authoritypb"
	"github.com/borough-os/borough/proto/joinpb"
)

// caAndOwner are a cluster CA and an owner.
func caAndOwner(t *testing.T, now time.Time) (*pki.CA, *pki.Cert) {
	t.Helper()
	ca, err := pki.NewCA("prod", now)
	if err != nil {
		t.Fatal(err)
	}
	owner, err := pki.NewOwner("owner", now)
	if err != nil {
		t.Fatal(err)
	}
	return ca, owner
}

// TestStatusRemoved plays a member that tells a peer it was removed, as
// a rogue one would to keep it out for good: with an owner, the peer
// believes it only with the owner's revocations of it.
func TestStatusRemoved(t *testing.T) {
	now := time.Now()
	ca, owner := caAndOwner(t, now)
	loopback := []net.IP{net.IPv4(127, 0, 0, 1)}
	member, err := ca.Issue("node-00000001", loopback, nil, now)
	if err != nil {
		t.Fatal(err)
	}
	peer, err := ca.Issue("node-00000002", loopback, nil, now)
	if err != nil {
		t.Fatal(err)
	}
	// crl revokes peer, with the owner's revocations naming nodes if
	// any.
	crl := func(number int64, nodes ...string) []byte {
		serials := []*big.Int{peer.Cert.SerialNumber}
		var der []byte
		var err error
		if nodes == nil {
			der, err = ca.CRL(number, serials, now)
		} else {
			der, err = authority.RevocationsCRL(ca, number, serials, owner.Cert, owner.Key,
				&authoritypb.Revocations{Cluster: "prod", Number: uint64(number), Nodes: nodes, Serials: pki.Hex(serials)}, now)
		}
		if err != nil {
			t.Fatal(err)
		}
		return der
	}
	peerTLS := tls.Certificate{Certificate: [][]byte{peer.Cert.Raw}, PrivateKey: peer.Key}
	for _, tc := range []struct {
		name    string
		crl     []byte
		noOwner bool
		// err is what Status says, "" if it believes the removal.
		err string
	}{
		{"with the owner's revocations", crl(2, "node-00000002"), false, ""},
		{"with no CRL", nil, false, "with no CRL to show for it"},
		{"with a CRL the owner did not sign for", crl(2), false, "the owner's revocations in its CRL number 2 do not"},
		{"in a cluster without an owner", nil, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b, _ := proto.Marshal(&joinpb.MemberStatus{Removed: true, Crl: tc.crl})
				w.Write(b)
			}))
			srv.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{member.Cert.Raw}, PrivateKey: member.Key}}}
			srv.StartTLS()
			defer srv.Close()
			o := owner.Cert
			if tc.noOwner {
				o = nil
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			removed, err := Status(ctx, []string{srv.Listener.Addr().String()}, ca.Cert, o, peerTLS)
			switch {
			case tc.err == "" && (err != nil || !removed):
				t.Errorf("Status = %v, %v; want removed", removed, err)
			case tc.err != "" && (err == nil || removed || !strings.Contains(err.Error(), tc.err)):
				t.Errorf("Status = %v, %v; want an error saying %q", removed, err, tc.err)
			}
		})
	}
}

// TestCheckRemoved plays a member that refuses a joiner as removed, as a
// rogue one would to keep it out for good: with an owner, the joiner
// believes it only with the owner's revocations that name it.
func TestCheckRemoved(t *testing.T) {
	now := time.Now()
	ca, owner := caAndOwner(t, now)
	signed := func(cluster string, nodes ...string) []byte {
		der, err := authority.RevocationsCRL(ca, 2, nil, owner.Cert, owner.Key,
			&authoritypb.Revocations{Cluster: cluster, Number: 2, Nodes: nodes}, now)
		if err != nil {
			t.Fatal(err)
		}
		return der
	}
	unsigned, err := ca.CRL(2, nil, now)
	if err != nil {
		t.Fatal(err)
	}
	const name = "node-00000002"
	for _, tc := range []struct {
		name    string
		crl     []byte
		noOwner bool
		// err is what CheckRemoved says, "" if it believes the removal.
		err string
	}{
		{"with the owner's revocations", signed("prod", name), false, ""},
		{"with no CRL", nil, false, "with no CRL to show for it"},
		{"with a CRL the owner did not sign for", unsigned, false, "the owner's revocations in its CRL number 2 do not"},
		{"with the owner's revocations of others", signed("prod", "node-00000003"), false, "the owner's revocations in its CRL number 2 do not"},
		{"with the owner's revocations in another cluster", signed("test", name), false, "the owner's revocations in its CRL number 2 do not"},
		{"in a cluster without an owner", nil, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := owner.Cert
			if tc.noOwner {
				o = nil
			}
			r := &Refusal{Reason: "node " + name + " was removed from the cluster", Removed: true, CRL: tc.crl}
			err := r.CheckRemoved(o, "prod", name)
			switch {
			case tc.err == "" && err != nil:
				t.Errorf("CheckRemoved = %v, want the removal believed", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Errorf("CheckRemoved = %v, want an error saying %q", err, tc.err)
			}
		})
	}
}
