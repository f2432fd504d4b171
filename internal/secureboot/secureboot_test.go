package secureboot

import (
	"bytes"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/borough-os/borough/esp"
	"github.com/borough-os/borough/internal/efivar"
	"github.com/borough-os/borough/internal/uki"
)

// keys makes a set of keys for a test.
func keys(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "keys")
	if err := Init(dir, "test"); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestInit(t *testing.T) {
	dir := keys(t)
	for _, name := range keyNames {
		for _, ext := range []string{".key", ".crt", ".cer", ".esl", ".auth"} {
			if _, err := os.Stat(filepath.Join(dir, name+ext)); err != nil {
				t.Error(err)
			}
		}
	}
	if fi, err := os.Stat(filepath.Join(dir, "db.key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("db.key: %v, mode %v; want 0600", err, fi.Mode())
	}
	if err := Init(dir, "test"); err == nil || !strings.Contains(err.Error(), "refusing to replace") {
		t.Errorf("a second Init in the same directory = %v, want a refusal", err)
	}
}

// TestSign signs the systemd stub and checks the signature with sbverify:
// it holds for the db certificate, not for another.
func TestSign(t *testing.T) {
	unsigned, err := os.ReadFile(uki.DebianStub)
	if err != nil {
		t.Fatalf("reading a PE binary to sign (apt-get install systemd-boot-efi): %v", err)
	}
	dir := keys(t)
	signed, err := Sign(unsigned, dir)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "signed.efi")
	if err := os.WriteFile(path, signed, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		cert string
		ok   bool
	}{{"db.crt", true}, {"KEK.crt", false}} {
		out, err := exec.Command("sbverify", "--cert", filepath.Join(dir, tc.cert), path).CombinedOutput()
		if (err == nil) != tc.ok {
			t.Errorf("sbverify --cert %s: %v, want ok=%v\n%s", tc.cert, err, tc.ok, out)
		}
	}
	if _, err := Sign(unsigned, t.TempDir()); err == nil || !strings.Contains(err.Error(), "signing the boot binary") {
		t.Errorf("Sign without keys = %v, want an error", err)
	}
}

func TestEnrol(t *testing.T) {
	dir := keys(t)
	updates, err := Updates(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		setupMode string // hex byte, or "" for no variable
		onESP     []string
		enrolled  bool
		err       string
	}{
		{"setup mode, updates", "01", keyNames, true, ""},
		{"user mode", "00", keyNames, false, ""},
		{"no EFI variable", "", keyNames, false, ""},
		{"setup mode, no updates", "01", nil, false, ""},
		{"setup mode, PK missing", "01", []string{"db", "KEK"}, false, "2 of the 3 Secure Boot key updates"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, vars := t.TempDir(), t.TempDir()
			if tc.setupMode != "" {
				b := []byte{6, 0, 0, 0, tc.setupMode[1] - '0'}
				if err := os.WriteFile(filepath.Join(vars, "SetupMode-"+efivar.GlobalVariable), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			for _, name := range tc.onESP {
				f := esp.SecureBootUpdate(name).In(root)
				if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(f, updates[name], 0o644); err != nil {
					t.Fatal(err)
				}
			}
			enrolled, err := Enrol(root, vars)
			if enrolled != tc.enrolled || (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("Enrol = %v, %v; want %v, error %q", enrolled, err, tc.enrolled, tc.err)
			}
			for _, name := range keyNames {
				vendor := efivar.GlobalVariable
				if name == "db" {
					vendor = imageSecurityDatabase
				}
				b, err := os.ReadFile(filepath.Join(vars, name+"-"+vendor))
				if !tc.enrolled {
					if err == nil {
						t.Errorf("%s written without enrolment", name)
					}
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				if attrs := binary.LittleEndian.Uint32(b); attrs != 0x27 || !bytes.Equal(b[4:], updates[name]) {
					t.Errorf("%s: attributes %#x and %d bytes, want 0x27 and the %d-byte update", name, attrs, len(b)-4, len(updates[name]))
				}
			}
		})
	}
}
