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
	luk := bytes.Repeat([]byte{1}, 32)
	r, err := SealForOwner(&owner.PublicKey, "sha256:owner", "prod", "node-00000001", luk, cuk)
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
	moved := *r
	moved.Node = "node-00000002"
	if _, _, err := moved.Open(owner); !errors.Is(err, ErrWrongKey) {
		t.Errorf("Open of a recovery claimed for another node = %v, want %v", err, ErrWrongKey)
	}
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if _, err := SealForOwner(&p384.PublicKey, "x", "prod", "node-00000001", luk, cuk); err == nil {
		t.Error("sealed to a P-384 owner key")
	}
}
