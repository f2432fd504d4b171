package efivar

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"
)

// LoadOption is a boot entry (EFI_LOAD_OPTION) that starts a file on a
// GPT partition.
type LoadOption struct {
	// Description names the entry in the firmware's boot menu.
	Description string
	// Partition is the partition the file is on.
	Partition Partition
	// Path is the file's path on the partition, with backslashes, as
	// \EFI\BOOT\BOOTX64.EFI.
	Path string
	// Arguments, if set, are passed to the file as its load options: a
	// UKI's stub takes them as the kernel command line.
	Arguments string
}

// Partition identifies a GPT partition the way a hard drive device path
// node does.
type Partition struct {
	// Number is the partition's index in the GPT, from 1.
	Number uint32
	// Start and Size are in logical blocks (512 bytes).
	Start, Size uint64
	// GUID is the partition's unique GUID.
	GUID uuid.UUID
}

// loadOptionActive marks an entry the boot manager may start.
const loadOptionActive = 0x1

// Marshal encodes o as the firmware reads a Boot#### variable.
func (o LoadOption) Marshal() ([]byte, error) {
	if !strings.HasPrefix(o.Path, `\`) || strings.Contains(o.Path, "/") {
		return nil, fmt.Errorf("boot entry path %q: want an absolute path with backslashes", o.Path)
	}
	if o.Partition.Number == 0 || o.Partition.Size == 0 {
		return nil, errors.New("boot entry: partition number and size are required")
	}
	dp := devicePath(o.Partition, o.Path)
	b := binary.LittleEndian.AppendUint32(nil, loadOptionActive)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(dp)))
	b = append(b, ucs2(o.Description, true)...)
	b = append(b, dp...)
	return append(b, ucs2(o.Arguments, false)...), nil
}

// devicePath is the device path of file on p: a hard drive media node, a
// file path media node and the end node.
func devicePath(p Partition, file string) []byte {
	const (
		typeMedia       = 0x04
		subtypeHD       = 0x01
		subtypeFilePath = 0x04
		typeEnd         = 0x7f
		subtypeEndAll   = 0xff
		formatGPT       = 0x02
		signatureGUID   = 0x02
	)
	hd := []byte{typeMedia, subtypeHD, 42, 0}
	hd = binary.LittleEndian.AppendUint32(hd, p.Number)
	hd = binary.LittleEndian.AppendUint64(hd, p.Start)
	hd = binary.LittleEndian.AppendUint64(hd, p.Size)
	hd = append(hd, guidBytes(p.GUID)...)
	hd = append(hd, formatGPT, signatureGUID)

	name := ucs2(file, true)
	fp := []byte{typeMedia, subtypeFilePath}
	fp = binary.LittleEndian.AppendUint16(fp, uint16(4+len(name)))
	fp = append(fp, name...)

	end := []byte{typeEnd, subtypeEndAll, 4, 0}
	return append(append(hd, fp...), end...)
}

// guidBytes encodes g as EFI stores a GUID: its first three fields
// little-endian, the rest as written.
func guidBytes(g uuid.UUID) []byte {
	b := make([]byte, 16)
	binary.LittleEndian.PutUint32(b[0:], binary.BigEndian.Uint32(g[0:4]))
	binary.LittleEndian.PutUint16(b[4:], binary.BigEndian.Uint16(g[4:6]))
	binary.LittleEndian.PutUint16(b[6:], binary.BigEndian.Uint16(g[6:8]))
	copy(b[8:], g[8:])
	return b
}
