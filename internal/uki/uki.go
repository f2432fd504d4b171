// Package uki assembles a unified kernel image (UKI): systemd's EFI stub
// with the kernel, initramfs, command line and os-release appended as PE
// sections, which the stub finds and boots. See
// https://uapi-group.org/specifications/specs/unified_kernel_image/.
//
// It is written here rather than taken from a library because no module
// that the Go proxy serves adds sections to a PE file, and shelling out to
// objcopy would make the build depend on binutils' PE support and its
// choice of addresses. The format work is small: each section's data goes
// at the next FileAlignment boundary of the file and the next
// SectionAlignment boundary of the image; the header's section count, image
// size and checksum are updated to match, and the stub's COFF symbol table
// (debug data that firmware ignores) is dropped.
package uki

import (
	"bytes"
	"debug/pe"
	"encoding/binary"
	"errors"
	"fmt"
)

// Section is a PE section to append. Name is at most 8 bytes, e.g. ".linux".
type Section struct {
	Name string
	Data []byte
}

// The sections a UKI carries, in the order Build is usually given them.
const (
	SectionOSRel   = ".osrel"
	SectionCmdline = ".cmdline"
	SectionLinux   = ".linux"
	SectionInitrd  = ".initrd"
)

// Offsets into a PE32+ optional header, from the PE/COFF specification.
const (
	optSectionAlignment = 32
	optFileAlignment    = 36
	optSizeOfImage      = 56
	optSizeOfHeaders    = 60
	optCheckSum         = 64
	sectionHeaderSize   = 40
	// IMAGE_SCN_CNT_INITIALIZED_DATA | IMAGE_SCN_MEM_READ
	dataCharacteristics = 0x40000040
)

// Build returns stub with sections appended. The stub must be an unsigned
// PE32+ image with room in its headers for the new section headers.
func Build(stub []byte, sections ...Section) ([]byte, error) {
	f, err := pe.NewFile(bytes.NewReader(stub))
	if err != nil {
		return nil, fmt.Errorf("parsing EFI stub: %w", err)
	}
	opt, ok := f.OptionalHeader.(*pe.OptionalHeader64)
	if !ok {
		return nil, errors.New("EFI stub is not a PE32+ image")
	}
	if opt.NumberOfRvaAndSizes > pe.IMAGE_DIRECTORY_ENTRY_SECURITY &&
		opt.DataDirectory[pe.IMAGE_DIRECTORY_ENTRY_SECURITY].Size != 0 {
		return nil, errors.New("EFI stub is signed; sign the UKI instead of the stub")
	}
	existing := map[string]bool{}
	var fileEnd, imageEnd uint32
	for _, s := range f.Sections {
		existing[s.Name] = true
		fileEnd = max(fileEnd, s.Offset+s.Size)
		imageEnd = max(imageEnd, s.VirtualAddress+max(s.VirtualSize, s.Size))
	}

	lfanew := binary.LittleEndian.Uint32(stub[0x3c:])
	coff := lfanew + 4
	optOff := coff + 20
	table := optOff + uint32(f.SizeOfOptionalHeader)
	tableEnd := table + uint32(len(f.Sections)+len(sections))*sectionHeaderSize
	if tableEnd > opt.SizeOfHeaders {
		return nil, fmt.Errorf("EFI stub headers have room for %d more sections, want %d",
			(opt.SizeOfHeaders-table)/sectionHeaderSize-uint32(len(f.Sections)), len(sections))
	}

	out := bytes.Clone(stub[:fileEnd])
	header := table + uint32(len(f.Sections))*sectionHeaderSize
	for _, s := range sections {
		if len(s.Name) > 8 {
			return nil, fmt.Errorf("section name %q is longer than 8 bytes", s.Name)
		}
		if existing[s.Name] {
			return nil, fmt.Errorf("EFI stub already has a %s section", s.Name)
		}
		existing[s.Name] = true
		out = pad(out, opt.FileAlignment)
		va := alignUp(imageEnd, opt.SectionAlignment)
		raw := alignUp(uint32(len(s.Data)), opt.FileAlignment)
		h := out[header : header+sectionHeaderSize]
		copy(h[0:8], s.Name)
		binary.LittleEndian.PutUint32(h[8:], uint32(len(s.Data)))
		binary.LittleEndian.PutUint32(h[12:], va)
		binary.LittleEndian.PutUint32(h[16:], raw)
		binary.LittleEndian.PutUint32(h[20:], uint32(len(out)))
		binary.LittleEndian.PutUint32(h[36:], dataCharacteristics)
		out = append(out, s.Data...)
		out = pad(out, opt.FileAlignment)
		imageEnd = va + uint32(len(s.Data))
		header += sectionHeaderSize
	}

	binary.LittleEndian.PutUint16(out[coff+2:], uint16(len(f.Sections)+len(sections)))
	// The COFF symbol table, if any, lay past the stub's sections and was
	// cut off with them; firmware never reads it.
	binary.LittleEndian.PutUint32(out[coff+8:], 0)
	binary.LittleEndian.PutUint32(out[coff+12:], 0)
	binary.LittleEndian.PutUint32(out[optOff+optSizeOfImage:], alignUp(imageEnd, opt.SectionAlignment))
	binary.LittleEndian.PutUint32(out[optOff+optCheckSum:], Checksum(out, optOff+optCheckSum))
	return out, nil
}

func alignUp(n, a uint32) uint32 {
	return (n + a - 1) / a * a
}

func pad(b []byte, a uint32) []byte {
	return append(b, make([]byte, int(alignUp(uint32(len(b)), a))-len(b))...)
}

// Checksum computes the PE image checksum of b, skipping the 4-byte
// checksum field at off: a 16-bit one's-complement-style sum of the file
// plus its length.
func Checksum(b []byte, off uint32) uint32 {
	var sum uint64
	for i := 0; i < len(b); i += 2 {
		if uint32(i) == off || uint32(i) == off+2 {
			continue
		}
		w := uint64(b[i])
		if i+1 < len(b) {
			w |= uint64(b[i+1]) << 8
		}
		sum += w
		sum = (sum & 0xffff) + (sum >> 16)
	}
	sum = (sum & 0xffff) + (sum >> 16)
	return uint32(sum) + uint32(len(b))
}

// DebianStub is where Debian's systemd-boot-efi package installs the stub.
const DebianStub = "/usr/lib/systemd/boot/efi/linuxx64.efi.stub"
