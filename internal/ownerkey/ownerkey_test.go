package ownerkey

import (
	"bytes"
	"errors"
	"testing"
)

var keyPEM = []byte("-----BEGIN EC PRIVATE KEY-----\nnot a real key, but bytes to keep\n-----END EC PRIVATE KEY-----\n")

// TestSealOpen opens a sealed key with its passphrase, and refuses a wrong
// passphrase and sealed keys truncated, bit-flipped or not sealed at all,
// each with its reason.
func TestSealOpen(t *testing.T) {
	const pass = "correct horse battery"
	sealed, err := Seal(keyPEM, pass)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(sealed, keyPEM[30:50]) || !Sealed(sealed) || Sealed(keyPEM) {
		t.Fatalf("Seal wrote %q", sealed)
	}
	flipped := bytes.Clone(sealed)
	flipped[len(flipped)/2] ^= 0x01
	for _, tc := range []struct {
		name    string
		sealed  []byte
		pass    string
		wantErr error
		anyErr  bool
	}{
		{name: "the right passphrase", sealed: sealed, pass: pass},
		{name: "a wrong passphrase", sealed: sealed, pass: "wrong horse battery", wantErr: ErrWrongPassphrase},
		{name: "truncated", sealed: sealed[:len(sealed)/2], pass: pass, anyErr: true},
		{name: "bit-flipped", sealed: flipped, pass: pass, anyErr: true},
		{name: "a key in clear", sealed: keyPEM, pass: pass, anyErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Open(tc.sealed, tc.pass)
			switch {
			case tc.wantErr != nil && !errors.Is(err, tc.wantErr):
				t.Errorf("Open = %v, want %v", err, tc.wantErr)
			case tc.anyErr && err == nil:
				t.Errorf("Open = %q, want an error", got)
			case tc.wantErr == nil && !tc.anyErr && (err != nil || !bytes.Equal(got, keyPEM)):
				t.Errorf("Open = %q, %v; want the key", got, err)
			}
		})
	}
	if _, err := Seal(keyPEM, "short"); err == nil {
		t.Error("Seal took a passphrase of 5 characters")
	}
}
