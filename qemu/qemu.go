// Package qemu boots Borough disk images in QEMU, headless, under OVMF
// (UEFI) firmware: for the boot tests, for benchmarks, and behind
// qemu/run.sh.
//
// Each VM has a state directory that outlives one boot: its own copy of
// OVMF's variable store and, with a TPM, swtpm's state, so that a reboot
// (or a second Start with the same StateDir) finds the firmware and the
// TPM as the VM left them. A headless VM's reboot is a new QEMU process
// on that state, not a reset inside the old one (VM.launch says why).
// The serial console is kept in memory, across reboots; WaitFor waits for
// a line on it and, on failure, returns the console's tail.
//
// KVM is used only once it has been seen to work (see accel.go); on
// machines where /dev/kvm exists but hangs QEMU, VMs run under TCG.
package qemu

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/borough-os/borough/internal/fwcfg"
)

// Disk is how the image is attached to the VM.
type Disk string

// Disk interfaces.
const (
	DiskVirtio Disk = "virtio"
	DiskNVMe   Disk = "nvme"
	DiskAHCI   Disk = "ahci"
)

// Firmware from Debian's ovmf package. The 4M builds are the ones Debian
// maintains; the code is read-only, the variables are copied per VM.
// The variable store template is empty: no Secure Boot keys, so the
// Secure Boot firmware starts in setup mode.
const (
	ovmfCode           = "/usr/share/OVMF/OVMF_CODE_4M.fd"
	ovmfSecureBootCode = "/usr/share/OVMF/OVMF_CODE_4M.secboot.fd"
	ovmfVars           = "/usr/share/OVMF/OVMF_VARS_4M.fd"
)

// Forward forwards a TCP port on the host's loopback to a guest port.
type Forward struct {
	Host, Guest int
}

// UserMAC is the MAC address of the NIC on QEMU's user-mode network (QEMU's
// own default, made explicit so that an enrolment config can match it).
const UserMAC = "52:54:00:12:34:56"

// LAN is a NIC on a Hub.
type LAN struct {
	// Hub is the hub's socket (Hub.Path).
	Hub string
	// MAC is the NIC's address, unique on the hub.
	MAC string
}

// Options describes a VM. Zero values take the defaults noted.
type Options struct {
	// Image is the raw disk image, used in place: the guest's writes
	// persist.
	Image string
	// VolatileCache serves Image and OtherDisks through nbdkit with a
	// writeback cache (apt-get install nbdkit): the guest's writes reach
	// a disk's file only when it flushes that disk, and killing the VM
	// loses the rest, as a power cut does to drives with a volatile write
	// cache. Without it, whatever QEMU wrote survives a kill in the
	// host's page cache.
	VolatileCache bool
	// DiskFaults serves Image and OtherDisks through nbdkit's error and
	// rate filters: while the VM's disks are failed (VM.FailDisks), every
	// read and write of them fails with EIO, as a failing drive's do;
	// while they are throttled (VM.ThrottleDisks), they are slow.
	DiskFaults bool
	// SlowDisk serves Image and OtherDisks through nbdkit's delay filter:
	// every read and write waits this long, as on a slow drive.
	SlowDisk time.Duration
	// StateDir holds the VM's firmware variables, TPM state and sockets.
	// It is created if missing. Required.
	StateDir string
	// Disk is the disk interface; default DiskVirtio. The image is the
	// first boot device.
	Disk Disk
	// ExtraDisks are more raw images, attached read-only as virtio disks
	// after the first (vdb, vdc, ...).
	ExtraDisks []string
	// OtherDisks are more raw images, writable, attached as virtio disks
	// after ExtraDisks; the firmware boots Image first.
	OtherDisks []string
	// MemoryMiB is the guest's memory; default 1024.
	MemoryMiB int
	// CPUs is the number of virtual CPUs; default 1.
	CPUs int
	// TPM attaches a TPM 2.0 (swtpm) whose state lives in StateDir.
	TPM bool
	// SecureBoot runs OVMF's Secure Boot firmware, which needs SMM and
	// keeps its variables where the guest's OS cannot write them behind
	// the firmware's back. It starts in setup mode; once keys are
	// enrolled (they stay in StateDir's variables), it boots only signed
	// binaries.
	SecureBoot bool
	// RTCBase, if set, starts the guest's real-time clock there instead of
	// at the host's time: QEMU's -rtc base=, as "2001-01-01".
	RTCBase string
	// NoRNG leaves out the virtio RNG device, as on a machine without a
	// hardware random number generator.
	NoRNG bool
	// Watchdog adds an i6300esb watchdog, which resets the VM when it
	// fires (an update's try boot arms it).
	Watchdog bool
	// IOMMU adds an emulated Intel IOMMU (VT-d), described to the guest
	// by an ACPI DMAR table, as on a server.
	IOMMU bool
	// FwCfg, if set, is a file exposed to the guest as fw_cfg
	// fwcfg.Enrolment.
	FwCfg string
	// TestParams, if set, are borough.test.* kernel parameters passed for
	// this boot only, through fw_cfg fwcfg.TestCmdline.
	TestParams string
	// ControllerDisks are more raw images, writable, each behind a
	// storage controller of its own, after OtherDisks.
	ControllerDisks []ControllerDisk
	// Network attaches a NIC on QEMU's user-mode network. It is implied
	// by Forwards.
	Network bool
	// NIC is the QEMU device of that NIC (rtl8139, vmxnet3, ...);
	// default virtio-net-pci.
	NIC string
	// Forwards are TCP ports forwarded from 127.0.0.1 into the guest.
	Forwards []Forward
	// LAN, if set, attaches a second virtio NIC to a Hub shared with
	// other VMs.
	LAN *LAN
	// Control adds a virtio-serial port named cmdline.TestControl,
	// through which VM.Control sends a test build commands.
	Control bool
	// Console, if set, receives the serial console as it arrives.
	Console io.Writer
	// Interactive connects the serial console and QEMU's monitor to this
	// process's terminal (Ctrl-A C switches, Ctrl-A X quits) instead of
	// capturing the console.
	Interactive bool
	// Logf, if set, receives progress messages.
	Logf func(format string, args ...any)
	// GDB, if set, is a unix socket on which QEMU's gdbstub listens, for
	// guestprof.Record. The VM does not wait for it.
	GDB string
}

func (o *Options) defaults() error {
	if o.Image == "" || o.StateDir == "" {
		return errors.New("qemu: Image and StateDir are required")
	}
	if _, err := os.Stat(o.Image); err != nil {
		return fmt.Errorf("qemu: disk image: %w", err)
	}
	if o.Disk == "" {
		o.Disk = DiskVirtio
	}
	if o.MemoryMiB == 0 {
		o.MemoryMiB = 1024
	}
	if o.CPUs == 0 {
		o.CPUs = 1
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	if o.FwCfg != "" {
		if _, err := os.Stat(o.FwCfg); err != nil {
			return fmt.Errorf("qemu: fw_cfg file: %w", err)
		}
	}
	return os.MkdirAll(o.StateDir, 0o755)
}

// tcgRAM names the memory backend of a VM under TCG: guest RAM in a
// memfd, not QEMU's default anonymous memory. QEMU asks the host for
// transparent huge pages on anonymous guest RAM, so the guest's first
// write to each 2 MiB of its RAM makes the host zero all 2 MiB, however
// little of it the guest uses (docs/decisions.md, "Guest RAM under
// TCG"). The host fills a memfd in 4 KiB pages as the guest touches them
// (shmem gets no huge pages unless the host asks for them). Under KVM the
// huge pages pay for themselves in the guest's own TLB, so KVM keeps the
// default.
const tcgRAM = "ram"

// tcgCPU is the CPU of a VM under TCG: QEMU's "max" with an invariant
// TSC and without ERMS and FSRM (fast REP MOVSB/STOSB). Both are costs of
// emulation, not of Borough (docs/decisions.md, "The CPU of a VM under
// TCG", has the samples):
//   - Without an invariant TSC, as any x86 machine Borough runs on has (a
//     TPM 2.0 and UEFI make it 2013 or later), Linux keeps checking the
//     TSC against the emulated HPET (its clocksource watchdog), and each
//     HPET read is an exit to QEMU. With it, Linux trusts the TSC, as it
//     does on real hardware with an invariant TSC and TSC_ADJUST.
//   - With ERMS, Linux copies and clears memory with REP MOVSB/STOSB,
//     which TCG runs a byte at a time; without it Linux uses the quadword
//     forms.
//
// Under KVM the CPU is the host's and the guest's clock is kvm-clock.
const tcgCPU = "max,+invtsc,-erms,-fsrm"

// args returns QEMU's command line for o, with accel "tcg" or "kvm".
func (o *Options) args(accel string) ([]string, error) {
	vars := filepath.Join(o.StateDir, "OVMF_VARS.fd")
	machine, code := "q35", ovmfCode
	if o.SecureBoot {
		machine, code = "q35,smm=on", ovmfSecureBootCode
	}
	cpu, ram := "max", []string(nil)
	if accel == "tcg" {
		machine += ",memory-backend=" + tcgRAM
		cpu = tcgCPU
		ram = []string{"-object", fmt.Sprintf("memory-backend-memfd,id=%s,size=%dM", tcgRAM, o.MemoryMiB)}
	}
	args := append([]string{
		"-machine", machine, "-accel", accel, "-cpu", cpu,
		"-m", strconv.Itoa(o.MemoryMiB), "-smp", strconv.Itoa(o.CPUs),
		"-nodefaults", "-display", "none", "-no-user-config",
		"-drive", "if=pflash,format=raw,unit=0,readonly=on,file=" + optValue(code),
		"-drive", "if=pflash,format=raw,unit=1,file=" + optValue(vars),
		"-drive", o.writableDrive("disk0", o.Image, 0),
	}, ram...)
	if o.IOMMU {
		// Before any PCI device, which it must translate for.
		args = append(args, "-device", "intel-iommu")
	}
	if o.GDB != "" {
		args = append(args, "-gdb", "unix:"+optValue(o.GDB)+",server=on,wait=off")
	}
	if o.SecureBoot {
		args = append(args, "-global", "driver=cfi.pflash01,property=secure,value=on")
	}
	if o.RTCBase != "" {
		args = append(args, "-rtc", "base="+o.RTCBase)
	}
	if !o.NoRNG {
		args = append(args, "-device", "virtio-rng-pci")
	}
	if o.Watchdog {
		args = append(args, "-device", "i6300esb", "-action", "watchdog=reset")
	}
	// bootindex makes OVMF boot the image even when another disk has a
	// boot binary too.
	switch o.Disk {
	case DiskVirtio:
		args = append(args, "-device", "virtio-blk-pci,drive=disk0,bootindex=0")
	case DiskNVMe:
		args = append(args, "-device", "nvme,drive=disk0,serial=borough0,bootindex=0")
	case DiskAHCI:
		// q35's built-in ICH9 AHCI controller.
		args = append(args, "-device", "ide-hd,drive=disk0,bus=ide.0,bootindex=0")
	default:
		return nil, fmt.Errorf("qemu: unknown disk interface %q (want virtio, nvme or ahci)", o.Disk)
	}
	for i, img := range o.ExtraDisks {
		id := fmt.Sprintf("disk%d", i+1)
		args = append(args, "-drive", "if=none,id="+id+",format=raw,readonly=on,file="+optValue(img),
			"-device", "virtio-blk-pci,drive="+id)
	}
	for i, img := range o.OtherDisks {
		id := fmt.Sprintf("other%d", i)
		args = append(args, "-drive", o.writableDrive(id, img, i+1), "-device", "virtio-blk-pci,drive="+id)
	}
	for i, d := range o.ControllerDisks {
		dev, err := d.args(i)
		if err != nil {
			return nil, err
		}
		args = append(args, dev...)
	}
	if o.Interactive {
		args = append(args, "-serial", "mon:stdio")
	} else {
		// A reset ends QEMU, and the VM starts it again (VM.launch).
		args = append(args, "-serial", "stdio", "-no-reboot",
			"-monitor", "unix:"+optValue(o.monitorPath())+",server=on,wait=off")
	}
	if o.Network || len(o.Forwards) > 0 {
		netdev := "user,id=net0"
		for _, f := range o.Forwards {
			netdev += fmt.Sprintf(",hostfwd=tcp:127.0.0.1:%d-:%d", f.Host, f.Guest)
		}
		nic := o.NIC
		if nic == "" {
			nic = "virtio-net-pci"
		}
		args = append(args, "-netdev", netdev, "-device", nic+",netdev=net0,mac="+UserMAC)
	}
	if o.LAN != nil {
		args = append(args, "-netdev", "stream,id=lan0,server=off,addr.type=unix,addr.path="+optValue(o.LAN.Hub),
			"-device", "virtio-net-pci,netdev=lan0,mac="+o.LAN.MAC)
	}
	if o.Control {
		args = append(args, o.controlArgs()...)
	}
	if o.FwCfg != "" {
		args = append(args, "-fw_cfg", "name="+fwcfg.Enrolment+",file="+optValue(o.FwCfg))
	}
	if o.TestParams != "" {
		path := filepath.Join(o.StateDir, "test-cmdline")
		if err := os.WriteFile(path, []byte(o.TestParams), 0o644); err != nil {
			return nil, err
		}
		args = append(args, "-fw_cfg", "name="+fwcfg.TestCmdline+",file="+optValue(path))
	}
	if o.TPM {
		args = append(args,
			"-chardev", "socket,id=chrtpm,path="+optValue(o.swtpmSocket()),
			"-tpmdev", "emulator,id=tpm0,chardev=chrtpm",
			"-device", "tpm-tis,tpmdev=tpm0")
	}
	return args, nil
}

// ControllerDisk is a disk behind a storage controller that QEMU
// emulates.
type ControllerDisk struct {
	// Controller is the controller's QEMU device: a SCSI HBA (megasas,
	// megasas-gen2, lsi53c895a, mptsas1068, pvscsi), or usb-storage or
	// usb-uas on an XHCI controller.
	Controller string
	Image      string
}

// args are the QEMU arguments of the i-th controller disk.
func (d ControllerDisk) args(i int) ([]string, error) {
	hba, drive := fmt.Sprintf("hba%d", i), fmt.Sprintf("cdisk%d", i)
	args := []string{"-drive", "if=none,id=" + drive + ",format=raw,file=" + optValue(d.Image)}
	switch d.Controller {
	case "megasas", "megasas-gen2", "lsi53c895a", "mptsas1068", "pvscsi":
		return append(args, "-device", d.Controller+",id="+hba, "-device", "scsi-hd,drive="+drive+",bus="+hba+".0"), nil
	case "usb-storage":
		return append(args, "-device", "qemu-xhci,id="+hba, "-device", "usb-storage,drive="+drive+",bus="+hba+".0"), nil
	case "usb-uas":
		return append(args, "-device", "qemu-xhci,id="+hba, "-device", "usb-uas,id=uas"+hba+",bus="+hba+".0",
			"-device", "scsi-hd,drive="+drive+",bus=uas"+hba+".0"), nil
	}
	return nil, fmt.Errorf("qemu: unknown storage controller %q for %s", d.Controller, d.Image)
}

// optValue escapes s for a QEMU (or swtpm) option list, where a comma
// ends a value unless doubled: a path with a comma in it would otherwise
// become options.
func optValue(s string) string { return strings.ReplaceAll(s, ",", ",,") }

func (o *Options) monitorPath() string { return filepath.Join(o.StateDir, "monitor.sock") }
func (o *Options) swtpmSocket() string { return filepath.Join(o.StateDir, "swtpm.sock") }

// awaitSocket waits up to 10 s for a helper (swtpm, nbdkit) to create
// its socket at path, and says whether it did.
func awaitSocket(path string) bool {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(path); err == nil {
			return true
		}
	}
	return false
}

// prepareVars gives the VM its own copy of OVMF's variable store, once.
func (o *Options) prepareVars() error {
	dst := filepath.Join(o.StateDir, "OVMF_VARS.fd")
	if _, err := os.Stat(dst); err == nil {
		return nil
	}
	b, err := os.ReadFile(ovmfVars)
	if err != nil {
		return fmt.Errorf("qemu: reading OVMF variables (apt-get install ovmf): %w", err)
	}
	return os.WriteFile(dst, b, 0o644)
}

// startSwtpm starts the VM's TPM and waits for its socket.
func (o *Options) startSwtpm(ctx context.Context) (*exec.Cmd, error) {
	state := filepath.Join(o.StateDir, "tpm")
	if strings.Contains(state, ",") {
		// swtpm's option lists have no escape for a comma.
		return nil, fmt.Errorf("qemu: a VM with a TPM needs a state directory without a comma in its path (swtpm cannot take one): %s", o.StateDir)
	}
	if err := os.MkdirAll(state, 0o700); err != nil {
		return nil, err
	}
	_ = os.Remove(o.swtpmSocket())
	cmd := exec.CommandContext(ctx, "swtpm", "socket", "--tpm2",
		"--tpmstate", "dir="+state,
		"--ctrl", "type=unixio,path="+o.swtpmSocket(),
		"--terminate")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	// The TPM lives as long as its VM, not as long as the terminal's
	// patience: QEMU ends it (--terminate).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("qemu: starting swtpm (apt-get install swtpm): %w", err)
	}
	if awaitSocket(o.swtpmSocket()) {
		return cmd, nil
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	return nil, fmt.Errorf("qemu: swtpm did not create its socket: %s", stderr.String())
}
