// Package bootdisk finds the disk the machine booted from, and on it the
// EFI system partition and Borough's data partition. There is no udev:
// disks come from sysfs, partitions from each disk's GPT (read with
// go-diskfs) and their device names from sysfs again.
package bootdisk

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"

	"github.com/diskfs/go-diskfs/partition/gpt"
	"github.com/google/uuid"

	"github.com/borough-os/borough/internal/blockdev"
	"github.com/borough-os/borough/internal/efivar"
	"github.com/borough-os/borough/internal/partition"
)

// loaderVendor is the vendor GUID of the EFI variable LoaderDevicePartUUID,
// which systemd's stub (and systemd-boot) sets to the GPT partition GUID
// of the ESP the firmware loaded it from.
const loaderVendor = "4a67b082-0a4c-41cf-b6c7-440b29bb8c4f"

// Disk is the boot disk and its two Borough partitions.
type Disk struct {
	// Name is the disk's kernel name, e.g. "vda"; Path its device node.
	Name, Path string
	// Size is the disk's size in bytes.
	Size int64
	// Table is the disk's GPT.
	Table *gpt.Table
	// ESP and Data are the partitions' device nodes.
	ESP, Data string
	// DataIndex is the data partition's number in the GPT (from 1).
	DataIndex int
	// FoundBy says how the disk was chosen: FoundByLoader or
	// FoundByDataPartition.
	FoundBy string
}

// How FindDisk chose the boot disk.
const (
	FoundByLoader        = "LoaderDevicePartUUID"
	FoundByBootEntry     = "LoaderDevicePartUUID and the boot entry's PCI path"
	FoundByDataPartition = "only disk with a data partition"
)

// bootESP returns the partition GUID of the ESP the machine booted from,
// or "" when the firmware or boot loader did not say.
func bootESP(efivars string) string {
	_, b, err := efivar.Read(efivars, "LoaderDevicePartUUID", loaderVendor)
	if err != nil {
		return ""
	}
	// A NUL-terminated UTF-16LE string.
	u := make([]uint16, 0, len(b)/2)
	for i := 0; i+1 < len(b); i += 2 {
		c := uint16(b[i]) | uint16(b[i+1])<<8
		if c == 0 {
			break
		}
		u = append(u, c)
	}
	return strings.ToUpper(string(utf16.Decode(u)))
}

// FindDisk finds the boot disk: the disk holding the ESP named by
// LoaderDevicePartUUID, or else the only disk with a Borough data
// partition. sysRoot and devRoot are normally /sys and /dev; efivars is
// where efivarfs is mounted.
func FindDisk(sysRoot, devRoot, efivars string) (*Disk, error) {
	disks, err := blockdev.List(sysRoot)
	if err != nil {
		return nil, err
	}
	want := bootESP(efivars)
	var loaded, candidates []*Disk
	for _, d := range disks {
		table, err := readGPT(filepath.Join(devRoot, d.Name))
		if err != nil {
			continue // not a GPT disk
		}
		disk := &Disk{Name: d.Name, Path: filepath.Join(devRoot, d.Name), Size: d.Size, Table: table}
		if want != "" && hasPartition(table, func(p *gpt.Partition) bool { return strings.EqualFold(p.GUID, want) }) {
			loaded = append(loaded, disk)
		}
		if hasPartition(table, isType(partition.DataType)) {
			candidates = append(candidates, disk)
		}
	}
	switch {
	case len(loaded) == 1:
		loaded[0].FoundBy = FoundByLoader
		return loaded[0].resolve(sysRoot, devRoot)
	case len(loaded) > 1:
		// Disks written from one image share their GUIDs until their first
		// boot gives them new ones; the boot entry's device path tells
		// which controller the firmware started from.
		if d := bootedDisk(loaded, sysRoot, efivars); d != nil {
			d.FoundBy = FoundByBootEntry
			return d.resolve(sysRoot, devRoot)
		}
		return nil, fmt.Errorf("the boot ESP %s is on several disks (%s), written from the same image, "+
			"and the boot entry does not tell which: remove all but the boot disk", want, diskNames(loaded))
	case len(candidates) == 1:
		candidates[0].FoundBy = FoundByDataPartition
		return candidates[0].resolve(sysRoot, devRoot)
	case len(candidates) == 0 && want != "":
		return nil, fmt.Errorf("no disk holds the boot ESP %s (LoaderDevicePartUUID) or a Borough data partition", want)
	case len(candidates) == 0:
		return nil, errors.New("no disk has a Borough data partition")
	case want != "":
		return nil, fmt.Errorf("the boot ESP %s (LoaderDevicePartUUID) is on no disk, and several disks have a Borough data partition (%s): remove all but one",
			want, diskNames(candidates))
	default:
		return nil, fmt.Errorf("the firmware did not name the boot ESP, and several disks have a Borough data partition (%s): remove all but one",
			diskNames(candidates))
	}
}

// bootedDisk returns the one disk among disks whose PCI path in sysfs is
// the one on the device path of the boot entry the firmware started, or
// nil.
func bootedDisk(disks []*Disk, sysRoot, efivars string) *Disk {
	n, err := efivar.BootCurrent(efivars)
	if err != nil {
		return nil
	}
	want, err := efivar.BootEntryPCIPath(efivars, n)
	if err != nil || len(want) == 0 {
		return nil
	}
	var found []*Disk
	for _, d := range disks {
		if slices.Equal(pciPath(sysRoot, d.Name), want) {
			found = append(found, d)
		}
	}
	if len(found) != 1 {
		return nil
	}
	return found[0]
}

// pciPath returns the PCI functions from the root complex down to disk
// name, from where its sysfs entry links: e.g.
// devices/pci0000:00/0000:00:1c.0/0000:01:00.0/nvme/nvme0/nvme0n1.
func pciPath(sysRoot, name string) []efivar.PCIFunction {
	dir, err := filepath.EvalSymlinks(filepath.Join(sysRoot, "block", name))
	if err != nil {
		return nil
	}
	var out []efivar.PCIFunction
	for _, c := range strings.Split(dir, string(filepath.Separator)) {
		if f, ok := efivar.ParsePCIFunction(c); ok {
			out = append(out, f)
		}
	}
	return out
}

func diskNames(disks []*Disk) string {
	var names []string
	for _, d := range disks {
		names = append(names, d.Name)
	}
	return strings.Join(names, ", ")
}

func readGPT(path string) (*gpt.Table, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return gpt.Read(f, 512, 512)
}

func isType(t string) func(*gpt.Partition) bool {
	return func(p *gpt.Partition) bool { return strings.EqualFold(string(p.Type), t) }
}

func hasPartition(t *gpt.Table, match func(*gpt.Partition) bool) bool {
	for _, p := range t.Partitions {
		if match(p) {
			return true
		}
	}
	return false
}

// ESPPartition returns the ESP as a boot entry's device path names it.
func (d *Disk) ESPPartition() (efivar.Partition, error) {
	esp, err := only(d, partition.ESPType, "EFI system partition")
	if err != nil {
		return efivar.Partition{}, err
	}
	guid, err := uuid.Parse(esp.GUID)
	if err != nil {
		return efivar.Partition{}, fmt.Errorf("the ESP's GUID %q: %w", esp.GUID, err)
	}
	return efivar.Partition{Number: uint32(esp.Index), Start: esp.Start, Size: esp.End - esp.Start + 1, GUID: guid}, nil
}

// resolve finds the ESP and data partitions on d and their device nodes.
func (d *Disk) resolve(sysRoot, devRoot string) (*Disk, error) {
	esp, err := only(d, partition.ESPType, "EFI system partition")
	if err != nil {
		return nil, err
	}
	data, err := only(d, partition.DataType, "Borough data partition")
	if err != nil {
		return nil, err
	}
	d.DataIndex = data.Index
	if d.ESP, err = partitionNode(sysRoot, devRoot, d.Name, esp.Index); err != nil {
		return nil, err
	}
	if d.Data, err = partitionNode(sysRoot, devRoot, d.Name, data.Index); err != nil {
		return nil, err
	}
	return d, nil
}

func only(d *Disk, typ, what string) (*gpt.Partition, error) {
	var found []*gpt.Partition
	for _, p := range d.Table.Partitions {
		if isType(typ)(p) {
			found = append(found, p)
		}
	}
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
		return nil, fmt.Errorf("boot disk %s has no %s (type %s)", d.Name, what, typ)
	default:
		return nil, fmt.Errorf("boot disk %s has %d partitions of type %s (%s); want one", d.Name, len(found), typ, what)
	}
}

// partitionNode finds partition number index of disk in sysfs, which
// knows its name (vda2, nvme0n1p2, sda2).
func partitionNode(sysRoot, devRoot, disk string, index int) (string, error) {
	entries, err := os.ReadDir(filepath.Join(sysRoot, "block", disk))
	if err != nil {
		return "", fmt.Errorf("listing partitions of %s: %w", disk, err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(sysRoot, "block", disk, e.Name(), "partition"))
		if err != nil {
			continue
		}
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && n == index {
			return filepath.Join(devRoot, e.Name()), nil
		}
	}
	return "", fmt.Errorf("the kernel has no partition %d on %s", index, disk)
}
