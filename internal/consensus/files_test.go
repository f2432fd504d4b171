package consensus

import (
	"crypto/ecdsa"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/borough-os/borough/internal/pki"
)

func TestFilesWrite(t *testing.T) {
	now := time.Now()
	ca, err := pki.NewCA("test", now)
	if err != nil {
		t.Fatal(err)
	}
	node, err := ca.Issue("node-1", nil, []string{"localhost"}, now)
	if err != nil {
		t.Fatal(err)
	}
	owner, err := pki.NewOwner("owner", now)
	if err != nil {
		t.Fatal(err)
	}
	crl, err := ca.CRL(1, nil, now)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		bundle Bundle
		// absent are the files the bundle leaves out.
		absent func(Files) []string
	}{
		{"a bootstrap node's: with the owner and the CA key",
			Bundle{CA: ca.Cert, Cert: node.Cert, Key: node.Key, Owner: owner.Cert, CRL: crl, CAKey: ca.Key},
			func(Files) []string { return nil }},
		{"a joined node's of a cluster without an owner",
			Bundle{CA: ca.Cert, Cert: node.Cert, Key: node.Key, CRL: crl},
			func(f Files) []string { return []string{f.Owner(), f.CAKey()} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := Files{Dir: filepath.Join(t.TempDir(), "pki")}
			if err := f.Write(tc.bundle); err != nil {
				t.Fatal(err)
			}
			absent := tc.absent(f)
			for _, path := range []string{f.Key(), f.CA(), f.Cert(), f.Trusted(), f.CRL(), f.Owner(), f.CAKey()} {
				st, err := os.Stat(path)
				switch {
				case slices.Contains(absent, path):
					if !os.IsNotExist(err) {
						t.Errorf("%s: written, want none (%v)", path, err)
					}
				case err != nil:
					t.Error(err)
				case st.Mode().Perm() != 0o600:
					t.Errorf("%s: mode %v, want 0600", path, st.Mode().Perm())
				}
			}
			if tc.bundle.CAKey == nil {
				return
			}
			b, err := os.ReadFile(f.CAKey())
			if err != nil {
				t.Fatal(err)
			}
			key, err := pki.ParseKeyPEM(b)
			if err != nil || !key.(*ecdsa.PrivateKey).Equal(ca.Key) {
				t.Errorf("the CA key file holds %v, %v; want the CA's key", key, err)
			}
		})
	}
}
