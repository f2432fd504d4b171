//go:build boot

package boottest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/borough-os/borough/internal/cmdline"
	"github.com/borough-os/borough/qemu"
)

// TestNICs boots the node with each NIC that QEMU emulates and the
// kernel has a driver for, as its only NIC: the hardware report names the
// driver, and DHCP configures the link.
//
// One machine has an IOMMU (Intel VT-d): the node says it is on, and its
// NIC's DMA, remapped through it, still carries DHCP. The others have
// none, and the node warns that it is off.
func TestNICs(t *testing.T) {
	for _, tc := range []struct {
		device, driver string
		iommu          bool
	}{
		{"rtl8139", "8139cp", true},
		{"vmxnet3", "vmxnet3", false},
		{"pcnet", "pcnet32", false},
		{"i82559er", "e100", false},
		{"tulip", "tulip", false},
	} {
		t.Run(tc.device, func(t *testing.T) {
			t.Parallel()
			vm := boot(t, qemu.Options{Image: nodeImage(t, cmdline.PoweroffOnFatal), NIC: tc.device, IOMMU: tc.iommu})
			iommu := "borough: warning: IOMMU off: this machine has none"
			if tc.iommu {
				iommu = "borough: IOMMU on: devices reach only the memory the kernel maps for them iommus=dmar0"
			}
			expect(t, vm, bootTimeout, "borough: network link name=eth0 mac="+strings.ToLower(qemu.UserMAC)+" driver="+tc.driver,
				iommu, "borough: network: network configured link=eth0")
		})
	}
}

// TestNoDriver boots the node with a NIC the kernel has no driver for
// (an NE2000) as its only one: the hardware report names it, and the node
// fails naming it, its data partition untouched.
func TestNoDriver(t *testing.T) {
	t.Parallel()
	img := nodeImage(t, cmdline.PoweroffOnFatal)
	before := dataHash(t, img)
	vm := boot(t, qemu.Options{Image: img, NIC: "ne2k_pci"})
	const controller = "10ec:8029 (Ethernet controller) at 0000:"
	expect(t, vm, bootTimeout, "borough: warning: controllers this kernel has no driver for: "+controller)
	line, _, err := vm.WaitLine("borough: node failed: bringing up the network: no network link", stepTimeout)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(line, "this kernel has no driver for the network controllers "+controller) {
		t.Errorf("the node failed saying %q, want the NE2000 named", line)
	}
	vm.Kill()
	if dataHash(t, img) != before {
		t.Error("the node changed its data partition")
	}
}

// TestStorageControllers boots the node with a second disk on each
// storage controller QEMU emulates that OVMF does not boot from: a driver
// takes every controller (the report names none without one), and the
// report names each disk with its controller's driver. The LSI SAS 1068
// is the exception: mptsas takes it, but QEMU's emulation shows Linux no
// disk behind it (nor after 20 s), so only the binding is checked.
func TestStorageControllers(t *testing.T) {
	t.Parallel()
	want := map[string]string{
		"megasas": "megaraid_sas", "lsi53c895a": "sym53c8xx", "mptsas1068": "",
		"pvscsi": "vmw_pvscsi", "usb-storage": "usb-storage", "usb-uas": "uas",
	}
	var disks []qemu.ControllerDisk
	for controller := range want {
		path := filepath.Join(t.TempDir(), controller+".img")
		if err := os.WriteFile(path, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(path, 64<<20); err != nil {
			t.Fatal(err)
		}
		disks = append(disks, qemu.ControllerDisk{Controller: controller, Image: path})
	}
	vm := boot(t, qemu.Options{Image: nodeImage(t, cmdline.PoweroffOnFatal), ControllerDisks: disks})
	expect(t, vm, bootTimeout, ready)
	report := grepConsole(vm.Console(), "borough: disk name=")
	if unbound := grepConsole(vm.Console(), "no driver for"); unbound != "" {
		t.Errorf("the hardware report names controllers without a driver:\n%s", unbound)
	}
	for controller, driver := range want {
		if driver != "" && !strings.Contains(report, " driver="+driver+" size=0.1GiB") {
			t.Errorf("no disk on the %s controller (driver %s) in the hardware report:\n%s\nthe kernel said of it:\n%s",
				controller, driver, report, grepConsole(vm.Console(), driver))
		}
	}
}

// grepConsole returns the console's lines that contain s.
func grepConsole(console, s string) string {
	var out []string
	for _, l := range strings.Split(console, "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
