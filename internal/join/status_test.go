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

// TestStatusRemoved plays a member that tells a peer it was removed, as
// a rogue one would to keep it out for good: with an owner, the peer
// believes it only with the owner's revocations of it.
func TestStatusRemoved(t *testing.T) {
	now := time.Now()
	ca, err := pki.NewCA("prod", now)
	if err != nil {
		t.Fatal(err)
	}
	owner, err := pki.NewOwner("owner", now)
	if err != nil {
		t.Fatal(err)
	}
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
