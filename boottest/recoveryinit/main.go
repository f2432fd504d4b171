// Command recoveryinit is the init of the recovery boot test. It runs the
// standard cryptsetup command that `borough recovery volume-key` printed
// (one argument a line in /recovery/args), mounts the opened volume
// read-only, prints what it holds (and the marker file a node wrote there,
// if any), and powers off.
package main

import (
	"fmt"
	"os"
	"os/exec"
	"strings"

	"golang.org/x/sys/unix"
)

func main() {
	if err := recover(); err != nil {
		fmt.Println("recovery: failed:", err)
	}
	unix.Sync()
	_ = unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
	select {}
}

func recover() error {
	for _, m := range []struct{ src, dst, fs string }{
		{"proc", "/proc", "proc"}, {"sysfs", "/sys", "sysfs"},
		{"devtmpfs", "/dev", "devtmpfs"}, {"tmpfs", "/run", "tmpfs"},
	} {
		if err := os.MkdirAll(m.dst, 0o755); err != nil {
			return err
		}
		if err := unix.Mount(m.src, m.dst, m.fs, 0, ""); err != nil {
			return fmt.Errorf("mounting %s: %w", m.dst, err)
		}
	}
	b, err := os.ReadFile("/recovery/args")
	if err != nil {
		return err
	}
	args := strings.Split(strings.TrimSpace(string(b)), "\n")
	fmt.Println("recovery: running", strings.Join(args, " "))
	cmd := exec.Command(args[0], args[1:]...)
	// No udev here: libdevmapper must make /dev/mapper nodes itself
	// rather than wait for udev to.
	cmd.Env = []string{"PATH=/sbin:/bin", "DM_DISABLE_UDEV=1"}
	out, err := cmd.CombinedOutput()
	fmt.Print(string(out))
	if err != nil {
		return fmt.Errorf("cryptsetup: %w", err)
	}
	if err := os.MkdirAll("/mnt", 0o755); err != nil {
		return err
	}
	if err := unix.Mount("/dev/mapper/borough-data", "/mnt", "ext4", unix.MS_RDONLY, "noload"); err != nil {
		return fmt.Errorf("mounting the opened volume: %w", err)
	}
	entries, err := os.ReadDir("/mnt")
	if err != nil {
		return err
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	fmt.Printf("recovery: the volume holds: %s\n", strings.Join(names, " "))
	if marker, err := os.ReadFile("/mnt/marker"); err == nil {
		fmt.Printf("recovery: marker=%s\n", marker)
	}
	return unix.Unmount("/mnt", 0)
}
