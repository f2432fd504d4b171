package storage

import (
	"bytes"
	"encoding/base64"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/borough-os/borough/esp"
	"github.com/borough-os/borough/internal/crypt"
	"github.com/borough-os/borough/internal/keyfile"
)

var _ ClusterKeys = Escrow{}

func TestEscrow(t *testing.T) {
	for _, tc := range []struct {
		name string
		tpm  bool
	}{
		{"no TPM", false},
		{"TPM", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			e := Escrow{k: keyFiles{root: root, policy: keyfile.TPMBestEffort}}
			if tc.tpm {
				e.k.tpm = openSim(t, 1).tpm
			}
			if key, err := e.Get(t.Context()); err == nil {
				t.Fatalf("Get before New = %x, want an error", key)
			} else if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), string(esp.ClusterKeyEscrow)) {
				t.Errorf("Get before New: error %q, want one naming %s and wrapping %v", err, esp.ClusterKeyEscrow, fs.ErrNotExist)
			}

			first, err := e.New()
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			key, err := e.New()
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			if len(key) != crypt.UnlockKeySize {
				t.Errorf("New returned %d bytes, want %d", len(key), crypt.UnlockKeySize)
			}
			if bytes.Equal(first, key) {
				t.Errorf("two calls of New returned the same key %x", key)
			}
			checkKeyFile(t, root, esp.ClusterKeyEscrow, key, tc.tpm)
			if _, err := os.Stat(filepath.Join(root, "EFI", "Borough", "cluster-key.sealed")); err != nil {
				t.Errorf("escrow file not at EFI/Borough/cluster-key.sealed: %v", err)
			}
			for range 2 {
				got, err := e.Get(t.Context())
				if err != nil {
					t.Fatalf("Get: %v", err)
				}
				if diff := cmp.Diff(key, got); diff != "" {
					t.Errorf("Get is not the last New's key (-want +got):\n%s", diff)
				}
			}
		})
	}
}

func TestClearKey(t *testing.T) {
	// A key file as a node without a TPM writes it, and one as a node
	// with a TPM does.
	root := t.TempDir()
	if err := (keyFiles{root: root, policy: keyfile.TPMBestEffort}).store(esp.SealedLocalKey, testKey(5)); err != nil {
		t.Fatal(err)
	}
	s := openSim(t, 1)
	if err := (keyFiles{root: root, tpm: s.tpm, policy: keyfile.TPMRequired}).store(esp.ClusterKeyEscrow, testKey(6)); err != nil {
		t.Fatal(err)
	}
	s.close(t)
	stored := func(f esp.File) []byte {
		b, err := os.ReadFile(f.In(root))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	clearFile := func(key []byte) []byte {
		return []byte(`{"version":1,"clear":"` + base64.StdEncoding.EncodeToString(key) + `"}`)
	}

	for _, tc := range []struct {
		name string
		b    []byte
		// want is the key; nil: an error.
		want []byte
		// wantIs, if set, must be in the error's chain.
		wantIs error
		// wantErr are substrings of the error.
		wantErr []string
	}{
		{name: "as stored without a TPM", b: stored(esp.SealedLocalKey), want: testKey(5)},
		{name: "clear", b: clearFile(testKey(7)), want: testKey(7)},
		{name: "unknown field", b: []byte(`{"version":1,"clear":"` + base64.StdEncoding.EncodeToString(testKey(8)) + `","x":1}`), want: testKey(8)},
		{name: "as stored with a TPM", b: stored(esp.ClusterKeyEscrow), wantIs: keyfile.ErrKeySealed},
		{name: "sealed", b: []byte(`{"version":1,"sealed":{}}`), wantIs: keyfile.ErrKeySealed},
		{name: "sealed and clear", b: []byte(`{"version":1,"sealed":{},"clear":"` + base64.StdEncoding.EncodeToString(testKey(9)) + `"}`), wantIs: keyfile.ErrKeySealed},
		{name: "no version", b: []byte(`{"clear":"` + base64.StdEncoding.EncodeToString(testKey(9)) + `"}`), wantErr: []string{"version 0, this node reads 1"}},
		{name: "newer version", b: bytes.Replace(clearFile(testKey(9)), []byte(`"version":1`), []byte(`"version":2`), 1), wantErr: []string{"version 2, this node reads 1"}},
		{name: "newer version, sealed", b: []byte(`{"version":2,"sealed":{}}`), wantErr: []string{"version 2, this node reads 1"}},
		{name: "too short", b: clearFile(testKey(9)[:31]), wantErr: []string{"31-byte key, want 32"}},
		{name: "too long", b: clearFile(append(testKey(9), 1)), wantErr: []string{"33-byte key, want 32"}},
		{name: "empty key", b: []byte(`{"version":1,"clear":""}`), wantErr: []string{"0-byte key, want 32"}},
		{name: "no key", b: []byte(`{"version":1}`), wantErr: []string{"key file"}},
		{name: "garbage", b: []byte("garbage"), wantErr: []string{"key file: damaged"}},
		{name: "empty", b: nil, wantErr: []string{"key file: damaged"}},
		{name: "not base64", b: []byte(`{"version":1,"clear":"!!"}`), wantErr: []string{"key file: damaged"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := keyfile.ClearKey(tc.b)
			if tc.want != nil {
				if err != nil {
					t.Fatalf("keyfile.ClearKey(%s): %v", tc.b, err)
				}
				if diff := cmp.Diff(tc.want, got); diff != "" {
					t.Errorf("keyfile.ClearKey (-want +got):\n%s", diff)
				}
				return
			}
			if err == nil {
				t.Fatalf("keyfile.ClearKey(%s) = %x, want an error", tc.b, got)
			}
			if got != nil {
				t.Errorf("keyfile.ClearKey returned a key with its error %v", err)
			}
			if tc.wantIs != nil && !errors.Is(err, tc.wantIs) {
				t.Errorf("keyfile.ClearKey error %q is not %q", err, tc.wantIs)
			}
			for _, s := range tc.wantErr {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("keyfile.ClearKey error %q does not contain %q", err, s)
				}
			}
		})
	}
}
