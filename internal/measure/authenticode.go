package measure

import (
	"bytes"
	"crypto/sha256"
	"debug/pe"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
)

// Offsets in a PE32+ optional header (PE/COFF specification).
const (
	optChecksum      = 64
	optSizeOfHeaders = 60
	optCertTable     = 144 // data directory entry 4: VirtualAddress (a file offset here), Size
	optMinSize       = optCertTable + 8
)

// Authenticode returns the SHA-256 Authenticode digest of a PE32+ image,
// as firmware measures it.
func Authenticode(img []byte) ([]byte, error) {
	if len(img) < 0x40 {
		return nil, errors.New("authenticode: too short for a PE image")
	}
	peOff := int(binary.LittleEndian.Uint32(img[0x3c:]))
	opt := peOff + 4 + 20
	if opt+optMinSize > len(img) || string(img[peOff:peOff+4]) != "PE\x00\x00" {
		return nil, errors.New("authenticode: no PE header")
	}
	if magic := binary.LittleEndian.Uint16(img[opt:]); magic != 0x20b {
		return nil, fmt.Errorf("authenticode: optional header magic %#x, want PE32+ (0x20b)", magic)
	}
	headers := int(binary.LittleEndian.Uint32(img[opt+optSizeOfHeaders:]))
	certOff := int(binary.LittleEndian.Uint32(img[opt+optCertTable:]))
	certSize := int(binary.LittleEndian.Uint32(img[opt+optCertTable+4:]))
	if headers > len(img) || headers < opt+optMinSize || certSize > len(img) {
		return nil, errors.New("authenticode: header sizes out of the image")
	}
	h := sha256.New()
	h.Write(img[:opt+optChecksum])
	h.Write(img[opt+optChecksum+4 : opt+optCertTable])
	h.Write(img[opt+optMinSize : headers])
	sections, err := rawSections(img)
	if err != nil {
		return nil, err
	}
	hashed := headers
	for _, s := range sections {
		end := int(s.Offset) + int(s.Size)
		if end > len(img) {
			return nil, fmt.Errorf("authenticode: section %s runs past the image", s.Name)
		}
		h.Write(img[s.Offset:end])
		hashed += int(s.Size)
	}
	end := len(img)
	if certSize > 0 {
		if certOff+certSize != len(img) {
			return nil, errors.New("authenticode: the certificate table is not at the image's end")
		}
		end = certOff
	}
	if hashed < end {
		h.Write(img[hashed:end])
	}
	return h.Sum(nil), nil
}

// rawSections returns the sections with data in the file, by file offset.
func rawSections(img []byte) ([]*pe.SectionHeader, error) {
	f, err := pe.NewFile(bytes.NewReader(img))
	if err != nil {
		return nil, fmt.Errorf("authenticode: %w", err)
	}
	var out []*pe.SectionHeader
	for _, s := range f.Sections {
		if s.Size > 0 {
			out = append(out, &s.SectionHeader)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Offset < out[j].Offset })
	return out, nil
}
