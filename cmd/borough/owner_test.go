package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/borough-os/borough/internal/ownerkey"
)

// TestOwnerKeyAtRest makes an owner identity and uses it as the commands
// do: its key is encrypted on disk, opens with the passphrase alone, and
// a replaced identity is kept aside.
func TestOwnerKeyAtRest(t *testing.T) {
	configDir = t.TempDir()
	const pass = "the owner's passphrase"
	t.Setenv(ownerkey.PassphraseEnv, pass)
	var out bytes.Buffer
	if err := ownerInit(&out, "me", false); err != nil {
		t.Fatal(err)
	}
	sealed, err := os.ReadFile(ownerKeyPath())
	if err != nil || !ownerkey.Sealed(sealed) || bytes.Contains(sealed, []byte("PRIVATE KEY")) {
		t.Fatalf("%s holds %q, %v; want an encrypted key", ownerKeyPath(), sealed, err)
	}
	for _, tc := range []struct {
		name    string
		env     map[string]string
		wantErr string
	}{
		{"the passphrase", map[string]string{ownerkey.PassphraseEnv: pass}, ""},
		{"a wrong passphrase", map[string]string{ownerkey.PassphraseEnv: "not the passphrase"}, "owner-key.age: the passphrase does not open the owner key"},
		{"no passphrase and no terminal", nil, "the owner key is encrypted: run from a terminal, or set BOROUGH_OWNER_PASSPHRASE"},
		{"a passphrase file", map[string]string{ownerkey.PassphraseFileEnv: writeFile(t, pass+"\n")}, ""},
		{"a passphrase file missing", map[string]string{ownerkey.PassphraseFileEnv: "/nonexistent/pass"}, "BOROUGH_OWNER_PASSPHRASE_FILE: open /nonexistent/pass"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			os.Unsetenv(ownerkey.PassphraseEnv)
			clear(unlocked)
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			_, err := ownerKeyPair()
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("ownerKeyPair = %v, want %q", err, tc.wantErr)
			}
		})
	}

	t.Setenv(ownerkey.PassphraseEnv, pass)
	if err := ownerInit(&out, "me", false); err == nil {
		t.Error("owner init replaced an identity without --force")
	}
	out.Reset()
	if err := ownerInit(&out, "me again", true); err != nil {
		t.Fatal(err)
	}
	kept, _ := filepath.Glob(ownerKeyPath() + ".replaced-*")
	if len(kept) != 1 || !bytes.Equal(readFile(t, kept[0]), sealed) || !strings.Contains(out.String(), "kept the old owner-key.age as "+kept[0]) {
		t.Errorf("owner init --force kept %v and said %q; want the old key kept, and where", kept, out.String())
	}
}

func writeFile(t *testing.T, s string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
