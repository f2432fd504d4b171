package main

import (
	"crypto/x509/pkix"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/borough-os/borough/internal/pki"
)

// TestSessionFiles plays another local user who prepares the runtime
// directory for the owner's session: nothing they made is followed or
// written through, the session's files are the owner's alone, and expired
// sessions go while live ones and others' stay.
func TestSessionFiles(t *testing.T) {
	base, elsewhere := t.TempDir(), t.TempDir()
	now := time.Now()
	ca, err := pki.NewCA("apps", now)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := pki.SignClient(ca.Cert, ca.Key, pkix.Name{CommonName: "owner"}, now, now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	// What the other user prepared: a link named as an expired session,
	// pointing at a directory of the owner's they want removed.
	victim := filepath.Join(elsewhere, "keep")
	if err := os.Mkdir(victim, 0o700); err != nil {
		t.Fatal(err)
	}
	expired := sessionPrefix + strconv.FormatInt(now.Add(-time.Hour).Unix(), 10) + "-"
	if err := os.Symlink(victim, filepath.Join(base, expired+"link")); err != nil {
		t.Fatal(err)
	}
	s, err := writeSession(base, cert)
	if err != nil {
		t.Fatal(err)
	}
	for path, perm := range map[string]os.FileMode{s.dir: os.ModeDir | 0o700, s.cert: 0o600, s.key: 0o600} {
		info, err := os.Lstat(path)
		if err != nil || info.Mode() != perm {
			t.Errorf("%s: %v, %v; want mode %v", path, info.Mode(), err, perm)
		}
	}
	if err := writeNew(s.key, []byte("again")); err == nil {
		t.Error("writeNew wrote over an existing key file")
	}
	link := filepath.Join(s.dir, "link")
	if err := os.Symlink(filepath.Join(elsewhere, "target"), link); err != nil {
		t.Fatal(err)
	}
	if err := writeNew(link, []byte("through a link")); err == nil {
		t.Error("writeNew wrote through a symbolic link")
	}
	old := filepath.Join(base, expired+"owners")
	if err := os.Mkdir(old, 0o700); err != nil {
		t.Fatal(err)
	}

	removeExpiredSessions(base, now)
	for path, want := range map[string]bool{old: false, s.dir: true, victim: true, filepath.Join(base, expired+"link"): true} {
		if _, err := os.Lstat(path); (err == nil) != want {
			t.Errorf("%s after removing expired sessions: %v, want it there: %v", path, err, want)
		}
	}
	removeExpiredSessions(base, s.expires.Add(time.Second))
	if _, err := os.Stat(s.dir); !os.IsNotExist(err) {
		t.Errorf("the session is still there once expired: %v", err)
	}
}
