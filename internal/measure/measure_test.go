package measure

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
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

// The boot testdata/README.md describes.
const (
	bootDigest = "bd057abfe4893546ccf850128ce94c739f7c945810346453e838a94aa0f13757"
	bootPCR4   = "0045120092c5751cfe44b73363475ffe160b1b9a39b0d33fe67f810204a7f8d5"
)

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestReplay4(t *testing.T) {
	log, err := os.ReadFile("testdata/ovmf-swtpm.eventlog")
	if err != nil {
		t.Fatal(err)
	}
	other := sha256.Sum256([]byte("another boot binary"))
	was := unhex(t, bootDigest)
	for _, tc := range []struct {
		name      string
		was, will []byte
		want      string // "" for any value but the boot's
		err       error
	}{
		{"the same binary: the boot's PCR 4", was, was, bootPCR4, nil},
		{"another binary: another PCR 4", was, other[:], "", nil},
		{"a binary the firmware did not start", other[:], was, "", ErrNotInLog},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Replay4(log, tc.was, tc.will)
			switch {
			case tc.err != nil:
				if !errors.Is(err, tc.err) {
					t.Fatalf("Replay4 = %x, %v; want %v", got, err, tc.err)
				}
			case err != nil:
				t.Fatal(err)
			case tc.want != "" && hex.EncodeToString(got) != tc.want:
				t.Errorf("Replay4 = %x, want %s", got, tc.want)
			case tc.want == "" && hex.EncodeToString(got) == bootPCR4:
				t.Error("another binary gave the boot's PCR 4")
			}
		})
	}
	if _, err := Replay4([]byte("not a log"), was, was); err == nil {
		t.Error("Replay4 took a log that is not one")
	}
}
