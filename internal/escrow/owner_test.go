package escrow

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"errors"
	"testing"
)

func TestOwnerRecovery(t *testing.T) {
	owner, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	luk, nodeKey := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32)
	r, err := SealForOwner(&owner.PublicKey, "sha256:owner", "prod", "node-00000001", nodeKey, luk, cuk)
	if err != nil {
		t.Fatal(err)
	}
	gotLUK, gotCUK, err := r.Open(owner)
	if err != nil || !bytes.Equal(gotLUK, luk) || !bytes.Equal(gotCUK, cuk) {
		t.Fatalf("Open with the owner's key = %x, %x, %v", gotLUK, gotCUK, err)
	}
	if _, _, err := r.Open(other); !errors.Is(err, ErrWrongKey) {
		t.Errorf("Open with another key = %v, want %v", err, ErrWrongKey)
	}
	// Whoever holds a copy of the record changes its cleartext to have
	// the owner send the CUK elsewhere: the record no longer opens.
	for _, tc := range []struct {
		name   string
		change func(*OwnerRecovery)
	}{
		{"claimed for another node", func(r *OwnerRecovery) { r.Node = "node-00000002" }},
		{"bound to another key", func(r *OwnerRecovery) { r.NodeKey = bytes.Repeat([]byte{3}, 32) }},
		{"without its key", func(r *OwnerRecovery) { r.NodeKey = nil }},
		{"with another CUK check", func(r *OwnerRecovery) { r.CUKCheck = bytes.Repeat([]byte{4}, 32) }},
	} {
		changed := *r
		tc.change(&changed)
		if _, _, err := changed.Open(owner); !errors.Is(err, ErrWrongKey) {
			t.Errorf("Open of a recovery %s = %v, want %v", tc.name, err, ErrWrongKey)
		}
	}
	if !r.Binds(nodeKey) || r.Binds(luk) {
		t.Errorf("Binds(the node's key) = %v, Binds(another) = %v", r.Binds(nodeKey), r.Binds(luk))
	}
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if _, err := SealForOwner(&p384.PublicKey, "x", "prod", "node-00000001", nodeKey, luk, cuk); err == nil {
		t.Error("sealed to a P-384 owner key")
	}
}

// TestOwnerUnlock: the owner seals the CUK it opened to the node's key of
// this boot; the node takes only the record's CUK, sealed to that key.
func TestOwnerUnlock(t *testing.T) {
	owner, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	r, err := SealForOwner(&owner.PublicKey, "sha256:owner", "prod", "node-00000001", bytes.Repeat([]byte{2}, 32), nil, cuk)
	if err != nil {
		t.Fatal(err)
	}
	priv, pub, _ := NewKey()
	otherPriv, otherPub, _ := NewKey()
	notCUK := bytes.Repeat([]byte{9}, len(cuk))
	for _, tc := range []struct {
		name     string
		to       []byte
		open     []byte
		key      []byte
		wantFail bool
	}{
		{"the CUK to this boot's key", pub, priv, cuk, false},
		{"a key that is not the CUK", pub, priv, notCUK, true},
		{"to another boot's key", otherPub, priv, cuk, true},
		{"opened with another boot's key", pub, otherPriv, cuk, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sealed, err := SealOwnerUnlock(tc.to, r, tc.key)
			if err != nil {
				t.Fatal(err)
			}
			got, err := OpenOwnerUnlock(tc.open, r, sealed)
			switch {
			case tc.wantFail && err == nil:
				t.Errorf("OpenOwnerUnlock took %x", got)
			case !tc.wantFail && (err != nil || !bytes.Equal(got, cuk)):
				t.Errorf("OpenOwnerUnlock = %x, %v; want the CUK", got, err)
			}
		})
	}
}
