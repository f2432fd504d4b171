package image

import (
	"fmt"
	"strings"

	"github.com/borough-os/borough/internal/uki"
)

// DefaultCmdline is the kernel command line of the boot binary. The last
// console= is /dev/console; init logs to every console listed.
// usb-storage.delay_use=0: the kernel waits a second by default between
// finding a USB disk and scanning it (for devices of the 2000s that
// needed it). The node starts within that second, and listed no USB disk
// in its hardware report; a node booted from a USB stick did not find its
// boot disk (init looks once). The scan still runs asynchronously, so
// this narrows that race rather than closing it.
const DefaultCmdline = "console=tty0 console=ttyS0,115200 panic=10 usb-storage.delay_use=0"

// BootParams are the parts of a boot binary.
type BootParams struct {
	// Stub is systemd's EFI stub (uki.DebianStub).
	Stub []byte
	// Kernel is a bzImage with the EFI stub built in.
	Kernel []byte
	// Initramfs is the compressed initramfs.
	Initramfs []byte
	// Cmdline is the kernel command line.
	Cmdline string
	// Version is Borough's version, for os-release.
	Version string
}

// BootBinary assembles the unified kernel image.
func BootBinary(p BootParams) ([]byte, error) {
	if strings.ContainsAny(p.Version, "\"\n") {
		return nil, fmt.Errorf("version %q has quotes or newlines", p.Version)
	}
	b, err := uki.Build(p.Stub,
		uki.Section{Name: uki.SectionOSRel, Data: []byte(osRelease(p.Version))},
		uki.Section{Name: uki.SectionCmdline, Data: []byte(p.Cmdline)},
		uki.Section{Name: uki.SectionLinux, Data: p.Kernel},
		uki.Section{Name: uki.SectionInitrd, Data: p.Initramfs},
	)
	if err != nil {
		return nil, fmt.Errorf("assembling boot binary: %w", err)
	}
	return b, nil
}

// osRelease is the os-release(5) text in the .osrel section, which boot
// menus show.
func osRelease(version string) string {
	return fmt.Sprintf("NAME=Borough\nID=borough\nPRETTY_NAME=\"Borough %s\"\nVERSION_ID=\"%s\"\nHOME_URL=\"https://github.com/borough-os/borough\"\n", version, version)
}
