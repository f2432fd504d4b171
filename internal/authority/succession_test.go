package authority

import (
	"errors"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/borough-os/borough/internal/pki"
	"github.com/borough-os/borough/proto/authoritypb"
)

// TestSucceed follows hand-overs as a node does, and tries what a member
// would pass off as one: every forgery is passed over with the reason,
// and the node ends at the owner the genuine chain names.
func TestSucceed(t *testing.T) {
	now := time.Now()
	owners := map[string]*pki.Cert{}
	for _, name := range []string{"a", "b", "c", "mallory"} {
		o, err := pki.NewOwner("owner-"+name, now)
		if err != nil {
			t.Fatal(err)
		}
		owners[name] = o
	}
	hand := func(from, to, cluster string, n uint64) []byte {
		b, err := SignSuccession(owners[from].Cert, owners[from].Key, cluster, n, owners[to].Cert)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	// forged claims to be a's hand-over to mallory, signed by mallory.
	forged := func(n uint64) []byte {
		b := hand("mallory", "mallory", "c1", n)
		var s authoritypb.Signed
		if err := proto.Unmarshal(b, &s); err != nil {
			t.Fatal(err)
		}
		body, err := proto.Marshal(&authoritypb.Succession{Cluster: "c1", Number: n, Previous: pki.Fingerprint(owners["a"].Cert), Owner: owners["mallory"].Cert.Raw})
		if err != nil {
			t.Fatal(err)
		}
		s.Body, s.Signer = body, pki.Fingerprint(owners["a"].Cert)
		out, err := proto.Marshal(&s)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	cases := []struct {
		name       string
		statements [][]byte
		after      uint64
		want       []string // the owners taken, in order
		wantErr    error
	}{
		{name: "none", want: nil},
		{name: "one", statements: [][]byte{hand("a", "b", "c1", 1)}, want: []string{"b"}},
		{name: "a chain, out of order", statements: [][]byte{hand("b", "c", "c1", 2), hand("a", "b", "c1", 1)}, want: []string{"b", "c"}},
		{name: "back and on", statements: [][]byte{hand("a", "b", "c1", 1), hand("b", "a", "c1", 2), hand("a", "c", "c1", 3)}, want: []string{"b", "a", "c"}},
		{name: "taken before", statements: [][]byte{hand("a", "b", "c1", 1)}, after: 1, want: nil},
		{name: "an old one replayed", statements: [][]byte{hand("a", "b", "c1", 1), hand("b", "a", "c1", 2), hand("a", "c", "c1", 3)}, after: 2, want: []string{"c"}},
		{name: "another cluster's", statements: [][]byte{hand("a", "b", "c2", 1)}, want: nil, wantErr: ErrSuccession},
		{name: "forged", statements: [][]byte{forged(1)}, want: nil, wantErr: ErrSignature},
		{name: "self-signed by another", statements: [][]byte{hand("mallory", "mallory", "c1", 1)}, want: nil},
		{name: "a forgery does not hold the genuine up", statements: [][]byte{forged(1), hand("a", "b", "c1", 2)}, want: []string{"b"}, wantErr: ErrSignature},
		{name: "damaged", statements: [][]byte{[]byte("not a statement"), hand("a", "b", "c1", 1)}, want: []string{"b"}, wantErr: ErrDamaged},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			taken, err := Succeed(tc.statements, owners["a"].Cert, tc.after, "c1")
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("error %v, want %v", err, tc.wantErr)
			}
			var got []string
			for _, h := range taken {
				got = append(got, h.Owner.Subject.CommonName[len("owner-"):])
				if n, err := SuccessionNumber(h.Statement); err != nil || n != h.Number {
					t.Errorf("SuccessionNumber = %d, %v; want %d", n, err, h.Number)
				}
			}
			if len(got) != len(tc.want) {
				t.Fatalf("took %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("took %v, want %v", got, tc.want)
				}
			}
		})
	}
}
