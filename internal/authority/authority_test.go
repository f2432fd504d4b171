package authority

import (
	"errors"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/borough-os/borough/internal/pki"
	"github.com/borough-os/borough/proto/authoritypb"
)

// TestOpen tries what an attacker would pass off as the owner's word:
// every change to a signed statement is refused, with the reason.
func TestOpen(t *testing.T) {
	now := time.Now()
	owner, err := pki.NewOwner("owner", now)
	if err != nil {
		t.Fatal(err)
	}
	other, err := pki.NewOwner("owner", now)
	if err != nil {
		t.Fatal(err)
	}
	release := &authoritypb.Release{Version: "1.1.0", BootBinarySha256: make([]byte, 32), PayloadSha256: make([]byte, 32)}
	sign := func(c *pki.Cert, kind Kind) []byte {
		b, err := Sign(c.Cert, c.Key, kind, release)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	good := sign(owner, KindRelease)
	edit := func(b []byte, f func(*authoritypb.Signed)) []byte {
		var s authoritypb.Signed
		if err := proto.Unmarshal(b, &s); err != nil {
			t.Fatal(err)
		}
		f(&s)
		out, err := proto.Marshal(&s)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	for _, tc := range []struct {
		name string
		b    []byte
		want error
	}{
		{"signed by the owner", good, nil},
		{"truncated", good[:len(good)-5], ErrDamaged},
		{"empty", nil, ErrKind},
		{"another kind", sign(owner, Kind("ticket")), ErrKind},
		{"kind relabelled", edit(sign(owner, Kind("ticket")), func(s *authoritypb.Signed) { s.Kind = string(KindRelease) }), ErrSignature},
		{"signed by another key", sign(other, KindRelease), ErrSigner},
		{"another key, naming the owner", edit(sign(other, KindRelease), func(s *authoritypb.Signed) { s.Signer = pki.Fingerprint(owner.Cert) }), ErrSignature},
		{"body bit-flipped", edit(good, func(s *authoritypb.Signed) { s.Body[3] ^= 1 }), ErrSignature},
		{"signature bit-flipped", edit(good, func(s *authoritypb.Signed) { s.Signature[10] ^= 1 }), ErrSignature},
		{"downgrade added", edit(good, func(s *authoritypb.Signed) {
			s.Body = append(s.Body, 0x20, 0x01) // field 4 (downgrade) = true
		}), ErrSignature},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got authoritypb.Release
			err := Open(tc.b, owner.Cert, KindRelease, &got)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Open = %v, want %v", err, tc.want)
			}
			if err == nil && !proto.Equal(&got, release) {
				t.Errorf("Open gave %v, want %v", &got, release)
			}
		})
	}
}

// TestSignWrongKey: a key that is not the certificate's signs nothing.
func TestSignWrongKey(t *testing.T) {
	a, _ := pki.NewOwner("a", time.Now())
	b, _ := pki.NewOwner("b", time.Now())
	if _, err := Sign(a.Cert, b.Key, KindRelease, &authoritypb.Release{}); err == nil {
		t.Error("Sign with another certificate's key succeeded")
	}
}
