// Package blockdev lists the machine's block devices from sysfs. There is
// no udev in Borough: sysfs is the source of truth for what disks exist.
package blockdev

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Disk is a whole block device (not a partition).
type Disk struct {
	// Name is the kernel's name, e.g. "vda", "nvme0n1", "sda".
	Name string
	// Size is the capacity in bytes.
	Size int64
}

// List returns the disks that have a non-zero size, skipping loop and RAM
// disks. sysRoot is normally "/sys".
func List(sysRoot string) ([]Disk, error) {
	entries, err := os.ReadDir(filepath.Join(sysRoot, "block"))
	if err != nil {
		return nil, fmt.Errorf("listing block devices: %w", err)
	}
	var disks []Disk
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, "loop") || strings.HasPrefix(name, "ram") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(sysRoot, "block", name, "size"))
		if err != nil {
			return nil, fmt.Errorf("reading size of %s: %w", name, err)
		}
		sectors, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("parsing size of %s: %w", name, err)
		}
		if sectors > 0 {
			// sysfs counts 512-byte sectors whatever the device's own.
			disks = append(disks, Disk{Name: name, Size: sectors * 512})
		}
	}
	return disks, nil
}
