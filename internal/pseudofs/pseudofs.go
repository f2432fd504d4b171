// Package pseudofs mounts the kernel's pseudo-filesystems that every
// Borough process expects: /proc, /sys, /dev, /dev/pts, /run, /tmp and,
// on UEFI machines, efivarfs. The table is data, so that what init mounts
// can be read in one place.
package pseudofs

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Mount is one entry of the mount table.
type Mount struct {
	Source, Target, FSType string
	Flags                  uintptr
	Data                   string
	// Mode is the permission of Target when it has to be created.
	Mode os.FileMode
	// IfExists skips the mount unless this path exists; efivarfs is only
	// there when the machine booted through UEFI.
	IfExists string
}

const secure = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC

// Table is what Borough mounts at boot, in order.
var Table = []Mount{
	{Source: "proc", Target: "/proc", FSType: "proc", Flags: secure, Mode: 0o555},
	{Source: "sysfs", Target: "/sys", FSType: "sysfs", Flags: secure, Mode: 0o555},
	{Source: "devtmpfs", Target: "/dev", FSType: "devtmpfs", Flags: unix.MS_NOSUID | unix.MS_NOEXEC, Data: "mode=0755", Mode: 0o755},
	{Source: "devpts", Target: "/dev/pts", FSType: "devpts", Flags: unix.MS_NOSUID | unix.MS_NOEXEC, Data: "mode=0620,ptmxmode=0666", Mode: 0o755},
	{Source: "tmpfs", Target: "/run", FSType: "tmpfs", Flags: unix.MS_NOSUID | unix.MS_NODEV, Data: "mode=0755", Mode: 0o755},
	{Source: "tmpfs", Target: "/tmp", FSType: "tmpfs", Flags: unix.MS_NOSUID | unix.MS_NODEV, Data: "mode=1777", Mode: 0o1777},
	{Source: "efivarfs", Target: "/sys/firmware/efi/efivars", FSType: "efivarfs", Flags: secure, IfExists: "/sys/firmware/efi"},
	// The TPM's event log, from which an update predicts PCR 4.
	{Source: "securityfs", Target: "/sys/kernel/security", FSType: "securityfs", Flags: secure, IfExists: "/sys/kernel/security"},
}

// Links are the /dev symlinks that programs expect and devtmpfs lacks.
var Links = map[string]string{
	"/dev/fd":     "/proc/self/fd",
	"/dev/stdin":  "/proc/self/fd/0",
	"/dev/stdout": "/proc/self/fd/1",
	"/dev/stderr": "/proc/self/fd/2",
}

// MountAll mounts Table, then creates Links.
func MountAll() error {
	for _, m := range Table {
		if err := m.mount(); err != nil {
			return err
		}
	}
	for link, target := range Links {
		if err := os.Symlink(target, link); err != nil && !os.IsExist(err) {
			return fmt.Errorf("linking %s: %w", link, err)
		}
	}
	return nil
}

func (m Mount) mount() error {
	if m.IfExists != "" {
		if _, err := os.Stat(m.IfExists); err != nil {
			return nil
		}
	}
	if err := os.MkdirAll(m.Target, m.Mode); err != nil {
		return fmt.Errorf("creating mount point %s: %w", m.Target, err)
	}
	if err := unix.Mount(m.Source, m.Target, m.FSType, m.Flags, m.Data); err != nil {
		return &os.PathError{Op: fmt.Sprintf("mount %s (flags %#x, %q)", m.FSType, m.Flags, m.Data), Path: m.Target, Err: err}
	}
	return nil
}
