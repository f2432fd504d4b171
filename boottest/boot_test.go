//go:build boot

package boottest

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/borough-os/borough/internal/cmdline"
	"github.com/borough-os/borough/qemu"
)

// TestBoot boots the node on each disk interface. Every boot also checks
// that process 1 reaps an orphaned grandchild, and that the ACPI power
// button powers the node off cleanly. The virtio boot first reboots
// through Ctrl-Alt-Del; the AHCI boot has a TPM (swtpm), which the kernel
// must find. The NVMe boot waits for a line that never comes: the
// timeout's error must carry the kernel's list of blocked tasks
// (qemu.VM's SysRq w), which tells a silent hang on I/O from others.
func TestBoot(t *testing.T) {
	for _, tc := range []struct {
		disk           qemu.Disk
		device, driver string
		reboot         bool
		tpm            bool
		silence        bool
	}{
		{disk: qemu.DiskVirtio, device: "vda", driver: "virtio_blk", reboot: true},
		{disk: qemu.DiskNVMe, device: "nvme0n1", driver: "nvme", silence: true},
		{disk: qemu.DiskAHCI, device: "sda", driver: "ahci", tpm: true},
	} {
		t.Run(string(tc.disk), func(t *testing.T) {
			t.Parallel()
			img := nodeImage(t, cmdline.PoweroffOnFatal, cmdline.TestOrphan)
			vm := boot(t, qemu.Options{Image: img, Disk: tc.disk, TPM: tc.tpm})
			if tc.tpm {
				expect(t, vm, bootTimeout, "tpm_tis MSFT0101:00: 2.0 TPM")
			}
			expect(t, vm, bootTimeout, "borough: init started")
			expect(t, vm, stepTimeout, "borough: disk name="+tc.device+" driver="+tc.driver+" size=1.0GiB",
				ready)
			expect(t, vm, stepTimeout, "borough: orphan-test: orphan reaped pid=")
			if tc.silence {
				expectBlockedTasks(t, vm)
			}
			if tc.reboot {
				if err := vm.CtrlAltDel(); err != nil {
					t.Fatal(err)
				}
				expect(t, vm, stepTimeout, "borough: Ctrl-Alt-Del: rebooting", "borough: rebooting")
				expect(t, vm, bootTimeout, "borough: init started", ready)
			}
			if err := vm.PowerOff(powerTimeout); err != nil {
				t.Fatal(err)
			}
			expect(t, vm, stepTimeout, "borough: power: power button pressed: powering off", "borough: powering off")
		})
	}
}

// expectBlockedTasks expects the kernel to answer SysRq w with its list
// of blocked tasks.
func expectBlockedTasks(t *testing.T, vm *qemu.VM) {
	t.Helper()
	if tail := sysrqAnswer(t, vm); !strings.Contains(tail, "sysrq: Show Blocked State") {
		t.Errorf("the timeout's console tail has no list of blocked tasks:\n%s", tail)
	}
}

// sysrqAnswer waits briefly for a line that never comes, so that qemu.VM
// sends SysRq w from the keyboard, and returns the timeout's console
// tail, which holds the kernel's answer.
func sysrqAnswer(t *testing.T, vm *qemu.VM) string {
	t.Helper()
	_, err := vm.WaitFor("a line no boot prints", 2*time.Second)
	var qerr *qemu.Error
	if !errors.As(err, &qerr) {
		t.Fatalf("waiting for a line that never comes returned %v, want a *qemu.Error", err)
	}
	return qerr.Console
}

// TestFatal makes a service fail fatally: init must print the reason and,
// with borough.debug.poweroff_on_fatal, power the VM off.
func TestFatal(t *testing.T) {
	t.Parallel()
	img := nodeImage(t, cmdline.PoweroffOnFatal, cmdline.TestFatal+"=disk-on-fire")
	vm := boot(t, qemu.Options{Image: img})
	expect(t, vm, bootTimeout, "borough: init started")
	expect(t, vm, stepTimeout,
		"borough: error: fatal: testhook: "+cmdline.TestFatal+": disk-on-fire",
		"borough: powering off")
	if err := vm.Wait(powerTimeout); err != nil {
		t.Fatal(err)
	}
}
