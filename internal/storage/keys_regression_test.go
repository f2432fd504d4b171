package storage

import (
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/borough-os/borough/esp"
	"github.com/borough-os/borough/internal/keyfile"
)

// "sealed":null is JSON for no sealed key; json.RawMessage keeps the 4
// bytes "null", which load and keyfile.ClearKey must not take for a sealed key.
func TestLoadSealedNull(t *testing.T) {
	const f = esp.SealedLocalKey
	root := t.TempDir()
	b := []byte(`{"version":1,"sealed":null,"clear":"` + base64.StdEncoding.EncodeToString(testKey(1)) + `"}`)
	mkdir(t, filepath.Dir(f.In(root)))
	writeFile(t, f.In(root), b)
	if _, err := (keyFiles{root: root, policy: keyfile.TPMBestEffort}).load(f); err != nil {
		t.Errorf("load of a clear key with \"sealed\":null: %v", err)
	}
	if _, err := keyfile.ClearKey(b); errors.Is(err, keyfile.ErrKeySealed) {
		t.Errorf("keyfile.ClearKey of a clear key with \"sealed\":null: %v", err)
	}
}

// A stale f.tmp left by a crash must not pass its mode on to f: O_CREATE
// does not apply 0600 to an existing file.
func TestStoreStaleTmpMode(t *testing.T) {
	const f = esp.SealedLocalKey
	root := t.TempDir()
	mkdir(t, filepath.Dir(f.In(root)))
	writeFile(t, f.In(root)+".tmp", nil) // 0644
	if err := (keyFiles{root: root, policy: keyfile.TPMDisabled}).store(f, testKey(1)); err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(f.In(root))
	if err != nil {
		t.Fatal(err)
	}
	if perm := info.Mode().Perm(); perm != 0o600 {
		t.Errorf("key file mode %v, want 0600", perm)
	}
}
