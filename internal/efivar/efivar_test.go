package efivar

import (
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/uuid"
)

// unhex decodes lines of hex bytes, each followed by a // comment.
func unhex(t *testing.T, s string) []byte {
	t.Helper()
	var digits string
	for _, line := range strings.Split(s, "\n") {
		code, _, _ := strings.Cut(line, "//")
		digits += strings.Join(strings.Fields(code), "")
	}
	b, err := hex.DecodeString(digits)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestLoadOptionMarshal(t *testing.T) {
	o := LoadOption{
		Description: "B",
		Partition: Partition{
			Number: 1, Start: 2048, Size: 262144,
			GUID: uuid.MustParse("8be4df61-93ca-11d2-aa0d-00e098032b8c"),
		},
		Path:      `\A.EFI`,
		Arguments: "x=1",
	}
	// Encoded by hand from UEFI 2.10, 3.1.3 and 10.3.5.
	want := unhex(t, `
		01 00 00 00  // attributes: LOAD_OPTION_ACTIVE
		40 00  // file path list length: 42 + 18 + 4
		42 00 00 00  // description "B", NUL
		04 01 2a 00  // media, hard drive, 42 bytes
		01 00 00 00  // partition 1
		00 08 00 00 00 00 00 00  // start 2048
		00 00 04 00 00 00 00 00  // size 262144
		61 df e4 8b ca 93 d2 11 aa 0d 00 e0 98 03 2b 8c  // GUID, mixed-endian
		02 02  // GPT, GUID signature
		04 04 12 00  // media, file path, 4 + 7 UCS-2 characters
		5c 00 41 00 2e 00 45 00 46 00 49 00 00 00  // \A.EFI, NUL
		7f ff 04 00  // end of device path
		78 00 3d 00 31 00  // arguments "x=1", no NUL`)
	got, err := o.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if hex.EncodeToString(got) != hex.EncodeToString(want) {
		t.Errorf("Marshal =\n%x\nwant\n%x", got, want)
	}
}

func TestLoadOptionMarshalRejects(t *testing.T) {
	good := LoadOption{Partition: Partition{Number: 1, Start: 34, Size: 100}, Path: `\EFI\BOOT\BOOTX64.EFI`}
	for _, tc := range []struct {
		name string
		edit func(o *LoadOption)
		want string
	}{
		{"relative path", func(o *LoadOption) { o.Path = `EFI\BOOT\BOOTX64.EFI` }, "want an absolute path"},
		{"slashes", func(o *LoadOption) { o.Path = "/EFI/BOOT/BOOTX64.EFI" }, "want an absolute path"},
		{"no partition", func(o *LoadOption) { o.Partition.Number = 0 }, "partition number and size"},
		{"empty partition", func(o *LoadOption) { o.Partition.Size = 0 }, "partition number and size"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := good
			tc.edit(&o)
			if _, err := o.Marshal(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Marshal = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestReadWrite(t *testing.T) {
	dir := t.TempDir()
	if err := SetBootNext(dir, 0x0b0b); err != nil {
		t.Fatal(err)
	}
	attrs, data, err := Read(dir, "BootNext", GlobalVariable)
	if err != nil {
		t.Fatal(err)
	}
	if attrs != BootVariable || hex.EncodeToString(data) != "0b0b" {
		t.Errorf("Read(BootNext) = %#x, %x; want %#x, 0b0b", attrs, data, BootVariable)
	}
	file := filepath.Join(dir, "BootNext-"+GlobalVariable)
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if hex.EncodeToString(b) != "070000000b0b" {
		t.Errorf("efivarfs file = %x, want attributes then data, 070000000b0b", b)
	}
	if _, _, err := Read(dir, "Boot0000", GlobalVariable); !errors.Is(err, ErrNotFound) {
		t.Errorf("Read of a missing variable: %v, want %v", err, ErrNotFound)
	}
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		content    string
		check      func(dir string) (string, error)
		want       string
	}{
		{"secure boot on", "SecureBoot", "0600000001", secureBoot, "true"},
		{"secure boot off", "SecureBoot", "0600000000", secureBoot, "false"},
		{"secure boot short", "SecureBoot", "060000", secureBoot, "shorter than its attributes"},
		{"secure boot long", "SecureBoot", "060000000100", secureBoot, "2 bytes, want 1"},
		{"boot current", "BootCurrent", "060000000b0b", bootCurrent, "0b0b"},
		{"boot current short", "BootCurrent", "060000000b", bootCurrent, "1 bytes, want 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			b, _ := hex.DecodeString(tc.content)
			if err := os.WriteFile(filepath.Join(dir, tc.file+"-"+GlobalVariable), b, 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := tc.check(dir)
			if err != nil {
				got = err.Error()
			}
			if !strings.Contains(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func secureBoot(dir string) (string, error) {
	on, err := SecureBoot(dir)
	if on {
		return "true", err
	}
	return "false", err
}

func bootCurrent(dir string) (string, error) {
	n, err := BootCurrent(dir)
	return hex.EncodeToString([]byte{byte(n >> 8), byte(n)}), err
}

func TestBootEntryPCIPath(t *testing.T) {
	file, err := LoadOption{Partition: Partition{Number: 1, Start: 2048, Size: 8}, Path: `\A`}.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	// Our own entry has no PCI nodes: its path starts at the partition.
	tail := file[8:] // after attributes, path length and the empty description
	acpiRoot := unhex(t, "02 01 0c 00 d0 41 03 0a 00 00 00 00  // PciRoot(0x0)")
	pci := func(dev, fn byte) []byte { return []byte{1, 1, 6, 0, fn, dev} }
	entry := func(nodes ...[]byte) []byte {
		var path []byte
		for _, n := range nodes {
			path = append(path, n...)
		}
		path = append(path, tail...)
		b := []byte{1, 0, 0, 0, byte(len(path)), byte(len(path) >> 8), 'Q', 0, 0, 0}
		return append(b, path...)
	}
	for _, tc := range []struct {
		name  string
		entry []byte
		want  string
	}{
		{"virtio disk", entry(acpiRoot, pci(3, 0)), "[{3 0}]"},
		{"behind a bridge", entry(acpiRoot, pci(0x1c, 2), pci(0, 0)), "[{28 2} {0 0}]"},
		{"partition only", entry(), "[]"},
		{"truncated", entry(acpiRoot, pci(3, 0))[:20], "device path is"},
		{"no end", append([]byte{1, 0, 0, 0, 12, 0, 'Q', 0, 0, 0}, acpiRoot...), "device path has no end node"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := Write(dir, BootEntryName(7), GlobalVariable, BootVariable, tc.entry); err != nil {
				t.Fatal(err)
			}
			got, err := BootEntryPCIPath(dir, 7)
			s := fmt.Sprint(got)
			if err != nil {
				s = err.Error()
			}
			if !strings.Contains(s, tc.want) {
				t.Errorf("BootEntryPCIPath = %q, want %q", s, tc.want)
			}
		})
	}
}

func TestParsePCIFunction(t *testing.T) {
	for _, tc := range []struct {
		name string
		want PCIFunction
		ok   bool
	}{
		{"0000:00:1c.0", PCIFunction{Device: 0x1c, Function: 0}, true},
		{"0000:01:00.7", PCIFunction{Device: 0, Function: 7}, true},
		{"pci0000:00", PCIFunction{}, false},
		{"0000:00:1c.8", PCIFunction{}, false},
		{"0000:00:1C.0", PCIFunction{}, false},
		{"0000:00:1c.0x", PCIFunction{}, false},
		{"0000-00:1c.0", PCIFunction{}, false},
		{"nvme0n1", PCIFunction{}, false},
		{"", PCIFunction{}, false},
	} {
		got, ok := ParsePCIFunction(tc.name)
		if got != tc.want || ok != tc.ok {
			t.Errorf("ParsePCIFunction(%q) = %+v, %v; want %+v, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}
