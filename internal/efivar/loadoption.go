package efivar

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
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

// PCIFunction is a PCI device and function, as a device path's PCI node
// names it under its parent bridge.
type PCIFunction struct {
	Device, Function uint8
}

// ParsePCIFunction reads a PCI function's name in sysfs,
// domain:bus:device.function in lower-case hex (0000:00:1c.0), and says
// whether name is one. By hand, not by a regular expression: its counted
// repetitions compile, at every boot, into a program of a copy each.
func ParsePCIFunction(name string) (PCIFunction, bool) {
	if len(name) != len("0000:00:00.0") || name[4] != ':' || name[7] != ':' || name[10] != '.' {
		return PCIFunction{}, false
	}
	for _, field := range []string{name[:4], name[5:7], name[8:10], name[11:]} {
		for _, c := range field {
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
				return PCIFunction{}, false
			}
		}
	}
	dev, _ := strconv.ParseUint(name[8:10], 16, 8)
	fn, _ := strconv.ParseUint(name[11:], 16, 8)
	if fn > 7 {
		return PCIFunction{}, false
	}
	return PCIFunction{Device: uint8(dev), Function: uint8(fn)}, true
}

// BootEntryPCIPath returns the PCI functions, from the root complex down,
// on the device path of boot entry n: the controller the firmware started
// that entry from.
func BootEntryPCIPath(dir string, n uint16) ([]PCIFunction, error) {
	_, b, err := Read(dir, BootEntryName(n), GlobalVariable)
	if err != nil {
		return nil, err
	}
	dp, err := loadOptionPath(b)
	if err != nil {
		return nil, fmt.Errorf("boot entry %s: %w", BootEntryName(n), err)
	}
	return pciPath(dp)
}

// loadOptionPath returns the device path of an encoded EFI_LOAD_OPTION.
func loadOptionPath(b []byte) ([]byte, error) {
	if len(b) < 6 {
		return nil, errors.New("load option too short")
	}
	pathLen := int(binary.LittleEndian.Uint16(b[4:]))
	rest := b[6:]
	// The description: UCS-2 up to and including its NUL.
	for {
		if len(rest) < 2 {
			return nil, errors.New("load option description has no end")
		}
		c := binary.LittleEndian.Uint16(rest)
		rest = rest[2:]
		if c == 0 {
			break
		}
	}
	if len(rest) < pathLen {
		return nil, fmt.Errorf("load option device path is %d bytes, %d left", pathLen, len(rest))
	}
	return rest[:pathLen], nil
}

// pciPath returns the PCI nodes of the first device path instance in dp.
func pciPath(dp []byte) ([]PCIFunction, error) {
	const (
		typeHardware = 0x01
		subtypePCI   = 0x01
		typeEnd      = 0x7f
	)
	var out []PCIFunction
	for len(dp) >= 4 {
		typ, sub, n := dp[0], dp[1], int(binary.LittleEndian.Uint16(dp[2:]))
		if n < 4 || n > len(dp) {
			return nil, fmt.Errorf("device path node of %d bytes, %d left", n, len(dp))
		}
		switch {
		case typ == typeEnd:
			return out, nil
		case typ == typeHardware && sub == subtypePCI && n == 6:
			out = append(out, PCIFunction{Function: dp[4], Device: dp[5]})
		}
		dp = dp[n:]
	}
	return nil, errors.New("device path has no end node")
}
