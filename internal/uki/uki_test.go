package uki

import (
	"bytes"
	"debug/pe"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func readStub(t *testing.T) []byte {
	t.Helper()
	stub, err := os.ReadFile(DebianStub)
	if err != nil {
		t.Fatalf("reading the EFI stub (apt-get install systemd-boot-efi): %v", err)
	}
	return stub
}

func TestBuild(t *testing.T) {
	stub := readStub(t)
	sections := []Section{
		{SectionOSRel, []byte("ID=borough\n")},
		{SectionCmdline, []byte("console=ttyS0")},
		{SectionLinux, bytes.Repeat([]byte{0xAA}, 5<<20+3)},
		{SectionInitrd, bytes.Repeat([]byte{0xBB}, 1<<20+1)},
	}
	out, err := Build(stub, sections...)
	if err != nil {
		t.Fatal(err)
	}
	f, err := pe.NewFile(bytes.NewReader(out))
	if err != nil {
		t.Fatalf("parsing the UKI: %v", err)
	}
	opt := f.OptionalHeader.(*pe.OptionalHeader64)
	var prevEnd uint32
	for i, s := range f.Sections {
		if s.VirtualAddress < prevEnd {
			t.Errorf("section %s at %#x overlaps the one before, which ends at %#x", s.Name, s.VirtualAddress, prevEnd)
		}
		prevEnd = s.VirtualAddress + s.VirtualSize
		appended := i >= len(f.Sections)-len(sections)
		if appended && (s.VirtualAddress%opt.SectionAlignment != 0 || s.Offset%opt.FileAlignment != 0) {
			t.Errorf("section %s is misaligned: VA %#x, offset %#x", s.Name, s.VirtualAddress, s.Offset)
		}
	}
	if want := alignUp(prevEnd, opt.SectionAlignment); opt.SizeOfImage != want {
		t.Errorf("SizeOfImage = %#x, want %#x", opt.SizeOfImage, want)
	}
	for _, want := range sections {
		s := f.Section(want.Name)
		if s == nil {
			t.Errorf("UKI has no %s section", want.Name)
			continue
		}
		data, err := s.Data()
		if err != nil {
			t.Fatal(err)
		}
		if got := data[:s.VirtualSize]; !bytes.Equal(got, want.Data) {
			t.Errorf("section %s holds %d bytes that differ from the %d given", want.Name, len(got), len(want.Data))
		}
	}
	sumOff := binary.LittleEndian.Uint32(out[0x3c:]) + 4 + 20 + optCheckSum
	if want := Checksum(out, sumOff); opt.CheckSum != want {
		t.Errorf("CheckSum = %#x, want %#x", opt.CheckSum, want)
	}
	again, err := Build(stub, sections...)
	if err != nil || !bytes.Equal(out, again) {
		t.Errorf("a second Build differs (err %v)", err)
	}
}

func TestBuildErrors(t *testing.T) {
	stub := readStub(t)
	for _, tc := range []struct {
		name     string
		stub     []byte
		sections []Section
		want     string
	}{
		{"not PE", []byte("MZ nonsense"), nil, "parsing EFI stub"},
		{"duplicate", stub, []Section{{".text", nil}}, "already has a .text section"},
		{"twice", stub, []Section{{".osrel", nil}, {".osrel", nil}}, "already has a .osrel section"},
		{"long name", stub, []Section{{".waytoolong", nil}}, "longer than 8 bytes"},
		{"no room", stub, make([]Section, 200), "room for"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Build(tc.stub, tc.sections...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Build = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestChecksum(t *testing.T) {
	// Words 0x0201 and 0x0403, field at 4 skipped, plus length 8.
	b := []byte{1, 2, 3, 4, 0xff, 0xff, 0xff, 0xff}
	if got, want := Checksum(b, 4), uint32(0x0201+0x0403+8); got != want {
		t.Errorf("Checksum = %#x, want %#x", got, want)
	}
	// A carry out of 16 bits folds back in.
	b = []byte{0xff, 0xff, 0x02, 0x00}
	if got, want := Checksum(b, 100), uint32(0x0002+4); got != want {
		t.Errorf("Checksum with carry = %#x, want %#x", got, want)
	}
}

func TestVersion(t *testing.T) {
	stub := readStub(t)
	for _, tc := range []struct {
		name, osrel, want, err string
	}{
		{"quoted", "NAME=Borough\nVERSION_ID=\"1.2.3\"\n", "1.2.3", ""},
		{"bare", "VERSION_ID=dev", "dev", ""},
		{"none", "NAME=Borough\n", "", "has no VERSION_ID"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := Build(stub, Section{SectionOSRel, []byte(tc.osrel)}, Section{SectionLinux, []byte{1}})
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(t.TempDir(), "boot.efi")
			os.WriteFile(path, out, 0o644)
			got, err := Version(path)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Version = %q, %v; want %q", got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("Version = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
	if _, err := Version(filepath.Join(t.TempDir(), "missing.efi")); err == nil {
		t.Error("Version of a missing file succeeded")
	}
}
