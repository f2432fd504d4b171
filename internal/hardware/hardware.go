// Package hardware reports a machine's network and storage hardware from
// sysfs at boot: each NIC and disk with the driver that runs it, and every
// PCI network or storage controller that no driver took. A node that
// comes up without a network on a machine it has never seen must say
// which card it has no driver for (vendor:device is what a user looks
// up), not just that it found no link.
//
// It reads sysfs itself rather than through a PCI library: what it needs
// is a handful of attribute files and driver links, and the kernel's own
// names for them are the stable interface (Documentation/ABI). Class
// names are a short table of the network and storage classes of the PCI
// Code and ID Assignment Specification; the image carries no pci.ids.
package hardware

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/borough-os/borough/internal/blockdev"
	"github.com/borough-os/borough/internal/efivar"
)

// Report is what Scan found.
type Report struct {
	NICs  []NIC
	Disks []Disk
	// Unbound are the PCI network and storage controllers without a
	// driver.
	Unbound []PCIDevice
	// IOMMUs are the kernel's IOMMUs (e.g. dmar0): with one, a device
	// reaches only the memory the kernel maps for it; without, any
	// device's DMA reads the node's memory, unlock keys and all.
	IOMMUs []string
}

// NIC is a network link backed by a device.
type NIC struct {
	Name, MAC, Driver string
}

// Disk is a disk backed by hardware, and the driver of the controller it
// hangs off (the nearest one in its device path).
type Disk struct {
	blockdev.Disk
	Driver string
}

// PCIDevice is a PCI function.
type PCIDevice struct {
	// Address is its bus address, e.g. 0000:00:03.0.
	Address        string
	Vendor, Device uint16
	// Class is the class code: base class, subclass, programming
	// interface.
	Class uint32
}

func (d PCIDevice) String() string {
	return fmt.Sprintf("%04x:%04x (%s) at %s", d.Vendor, d.Device, className(d.Class), d.Address)
}

// Network says whether d is a network controller.
func (d PCIDevice) Network() bool { return d.Class>>16 == 0x02 }

// Storage says whether d is a mass storage controller.
func (d PCIDevice) Storage() bool { return d.Class>>16 == 0x01 }

var classes = map[uint32]string{
	0x0100: "SCSI controller", 0x0101: "IDE controller", 0x0104: "RAID controller",
	0x0105: "ATA controller", 0x0106: "SATA controller", 0x0107: "SAS controller",
	0x0108: "NVMe controller", 0x0180: "storage controller",
	0x0200: "Ethernet controller", 0x0207: "InfiniBand controller", 0x0280: "network controller",
}

func className(class uint32) string {
	if n, ok := classes[class>>8]; ok {
		return n
	}
	switch class >> 16 {
	case 0x01:
		return "storage controller"
	case 0x02:
		return "network controller"
	}
	return fmt.Sprintf("class %06x", class)
}

// Scan reads the report from sysfs mounted at sys.
func Scan(sys string) (Report, error) {
	var r Report
	var err error
	if r.NICs, err = nics(sys); err != nil {
		return r, err
	}
	if r.Disks, err = disks(sys); err != nil {
		return r, err
	}
	if r.Unbound, err = unbound(sys); err != nil {
		return r, err
	}
	r.IOMMUs, err = iommus(sys)
	return r, err
}

// iommus lists the IOMMUs the kernel runs (class/iommu).
func iommus(sys string) ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(sys, "class", "iommu"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names, err
}

// UnboundNetwork returns the network controllers without a driver.
func (r Report) UnboundNetwork() []PCIDevice {
	var out []PCIDevice
	for _, d := range r.Unbound {
		if d.Network() {
			out = append(out, d)
		}
	}
	return out
}

// Log writes a line for each NIC and disk, and one warning naming every
// controller without a driver.
func (r Report) Log(log *slog.Logger) {
	for _, n := range r.NICs {
		log.Info("network link", "name", n.Name, "mac", n.MAC, "driver", n.Driver)
	}
	for _, d := range r.Disks {
		log.Info("disk", "name", d.Name, "driver", d.Driver, "size", fmt.Sprintf("%.1fGiB", float64(d.Size)/(1<<30)))
	}
	if len(r.Unbound) > 0 {
		log.Warn("controllers this kernel has no driver for: " + Describe(r.Unbound))
	}
	if len(r.IOMMUs) > 0 {
		log.Info("IOMMU on: devices reach only the memory the kernel maps for them", "iommus", strings.Join(r.IOMMUs, ","))
	} else {
		log.Warn("IOMMU off: this machine has none, or its firmware does not describe one (ACPI DMAR or IVRS): " +
			"a device's DMA can read the node's memory")
	}
}

// Describe names devices in one line.
func Describe(devs []PCIDevice) string {
	var s []string
	for _, d := range devs {
		s = append(s, d.String())
	}
	return strings.Join(s, ", ")
}

// nics lists the links in class/net that are backed by a device (not lo,
// bridges or tunnels).
func nics(sys string) ([]NIC, error) {
	dir := filepath.Join(sys, "class", "net")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("listing network links: %w", err)
	}
	var out []NIC
	for _, e := range entries {
		dev := filepath.Join(dir, e.Name(), "device")
		if _, err := os.Stat(dev); err != nil {
			continue
		}
		mac, _ := os.ReadFile(filepath.Join(dir, e.Name(), "address"))
		out = append(out, NIC{Name: e.Name(), MAC: strings.TrimSpace(string(mac)), Driver: driverOf(dev)})
	}
	return out, nil
}

// disks lists the disks (blockdev.List) that are backed by a device: not
// device-mapper targets.
func disks(sys string) ([]Disk, error) {
	all, err := blockdev.List(sys)
	if err != nil {
		return nil, err
	}
	var out []Disk
	for _, d := range all {
		dev := filepath.Join(sys, "block", d.Name, "device")
		if _, err := os.Stat(dev); err == nil {
			out = append(out, Disk{Disk: d, Driver: controllerDriver(dev)})
		}
	}
	return out, nil
}

// driverOf is the name of the driver bound to device dir, or "".
func driverOf(dir string) string {
	target, err := os.Readlink(filepath.Join(dir, "driver"))
	if err != nil {
		return ""
	}
	return filepath.Base(target)
}

// classDrivers drive a kind of device whatever controller it is on; a
// disk's controller is the nearest device above it with another driver.
var classDrivers = map[string]bool{"sd": true, "sr": true}

// controllerDriver walks up from a block device's device to the first
// device with a driver that is not a class driver.
func controllerDriver(dev string) string {
	path, err := filepath.EvalSymlinks(dev)
	if err != nil {
		return ""
	}
	for ; path != "/" && path != "." && filepath.Base(path) != "devices"; path = filepath.Dir(path) {
		if d := driverOf(path); d != "" && !classDrivers[d] {
			return d
		}
	}
	return ""
}

// unbound lists the PCI network and storage controllers with no driver.
func unbound(sys string) ([]PCIDevice, error) {
	dir := filepath.Join(sys, "bus", "pci", "devices")
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing PCI devices: %w", err)
	}
	var out []PCIDevice
	for _, e := range entries {
		if _, ok := efivar.ParsePCIFunction(e.Name()); !ok {
			continue
		}
		path := filepath.Join(dir, e.Name())
		d, err := readPCI(path, e.Name())
		if err != nil {
			return nil, err
		}
		if (d.Network() || d.Storage()) && driverOf(path) == "" {
			out = append(out, d)
		}
	}
	return out, nil
}

func readPCI(path, addr string) (PCIDevice, error) {
	d := PCIDevice{Address: addr}
	fields := []struct {
		name string
		bits int
		set  func(uint64)
	}{
		{"vendor", 16, func(v uint64) { d.Vendor = uint16(v) }},
		{"device", 16, func(v uint64) { d.Device = uint16(v) }},
		{"class", 24, func(v uint64) { d.Class = uint32(v) }},
	}
	for _, f := range fields {
		b, err := os.ReadFile(filepath.Join(path, f.name))
		if err != nil {
			return d, fmt.Errorf("PCI device %s: %w", addr, err)
		}
		v, err := strconv.ParseUint(strings.TrimPrefix(strings.TrimSpace(string(b)), "0x"), 16, f.bits)
		if err != nil {
			return d, fmt.Errorf("PCI device %s: %s %q: %w", addr, f.name, strings.TrimSpace(string(b)), err)
		}
		f.set(v)
	}
	return d, nil
}
