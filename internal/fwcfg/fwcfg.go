// Package fwcfg reads QEMU's fw_cfg entries, which the kernel exposes in
// sysfs with CONFIG_FW_CFG_SYSFS. Only QEMU machines have them; on real
// hardware every Read returns an error wrapping os.ErrNotExist.
package fwcfg

import (
	"fmt"
	"os"
	"path/filepath"
)

// Names Borough reads.
const (
	// Enrolment is the node's enrolment config.
	Enrolment = "opt/borough/enrolment"
	// TestCmdline holds extra borough.test.* parameters for one boot, so
	// that a boot test can vary them between boots of one disk.
	TestCmdline = "opt/borough/test-cmdline"
)

// byName is where sysfs lists entries by name. A name's slashes become
// directories; the leaf is a symlink into by_key.
const byName = "/sys/firmware/qemu_fw_cfg/by_name"

// Read returns the contents of the entry name.
func Read(name string) ([]byte, error) {
	b, err := os.ReadFile(filepath.Join(byName, name, "raw"))
	if err != nil {
		return nil, fmt.Errorf("reading fw_cfg %s: %w", name, err)
	}
	return b, nil
}
