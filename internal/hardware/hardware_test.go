package hardware

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/borough-os/borough/internal/blockdev"
)

// sysfs builds a sysfs tree in a temporary directory, laid out as the
// kernel lays it out: devices under devices/, class and block entries as
// symlinks into it, driver links into bus/*/drivers.
type sysfs struct {
	t    *testing.T
	root string
}

func (s sysfs) file(path, content string) {
	s.t.Helper()
	p := filepath.Join(s.root, path)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		s.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content+"\n"), 0o644); err != nil {
		s.t.Fatal(err)
	}
}

func (s sysfs) dir(path string) {
	s.t.Helper()
	if err := os.MkdirAll(filepath.Join(s.root, path), 0o755); err != nil {
		s.t.Fatal(err)
	}
}

// link makes path a symlink to target (relative to the root).
func (s sysfs) link(path, target string) {
	s.t.Helper()
	p := filepath.Join(s.root, path)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		s.t.Fatal(err)
	}
	rel, err := filepath.Rel(filepath.Dir(p), filepath.Join(s.root, target))
	if err != nil {
		s.t.Fatal(err)
	}
	if err := os.Symlink(rel, p); err != nil {
		s.t.Fatal(err)
	}
}

const pci = "devices/pci0000:00/"

func (s sysfs) pci(addr, vendor, device, class, driver string) {
	dev := pci + addr
	s.file(dev+"/vendor", vendor)
	s.file(dev+"/device", device)
	s.file(dev+"/class", class)
	s.link("bus/pci/devices/"+addr, dev)
	if driver != "" {
		s.link(dev+"/driver", "bus/pci/drivers/"+driver)
	}
}

func (s sysfs) driver(dev, driver string) {
	s.link(dev+"/driver", "bus/drivers/"+driver)
}

func machine(t *testing.T) string {
	s := sysfs{t: t, root: t.TempDir()}
	// A virtio NIC: the PCI function is virtio-pci's, the link virtio_net's.
	s.pci("0000:00:02.0", "0x1af4", "0x1000", "0x020000", "virtio-pci")
	s.driver(pci+"0000:00:02.0/virtio0", "virtio_net")
	s.file(pci+"0000:00:02.0/virtio0/net/eth0/address", "52:54:00:12:34:56")
	s.link(pci+"0000:00:02.0/virtio0/net/eth0/device", pci+"0000:00:02.0/virtio0")
	s.link("class/net/eth0", pci+"0000:00:02.0/virtio0/net/eth0")
	s.file("devices/virtual/net/lo/address", "00:00:00:00:00:00")
	s.link("class/net/lo", "devices/virtual/net/lo")
	// A disk behind a MegaRAID HBA: sd drives the disk, megaraid_sas the HBA.
	s.pci("0000:00:04.0", "0x1000", "0x0079", "0x010400", "megaraid_sas")
	lun := pci + "0000:00:04.0/host0/target0:2:0/0:2:0:0"
	s.driver(lun, "sd")
	s.file(lun+"/block/sda/size", "8388608")
	s.link(lun+"/block/sda/device", lun)
	s.link("block/sda", lun+"/block/sda")
	s.file("devices/virtual/block/loop0/size", "0")
	s.link("block/loop0", "devices/virtual/block/loop0")
	// An NE2000 NIC and an LSI SAS HBA with no driver; a display
	// controller with none, which is not reported.
	s.pci("0000:00:05.0", "0x10ec", "0x8029", "0x020000", "")
	s.pci("0000:00:06.0", "0x1000", "0x0054", "0x010000", "")
	s.pci("0000:00:01.0", "0x1234", "0x1111", "0x030000", "")
	s.file("devices/virtual/iommu/dmar0/intel-iommu/version", "1:0")
	s.link("class/iommu/dmar0", "devices/virtual/iommu/dmar0")
	return s.root
}

func TestScan(t *testing.T) {
	r, err := Scan(machine(t))
	if err != nil {
		t.Fatal(err)
	}
	if want := []NIC{{Name: "eth0", MAC: "52:54:00:12:34:56", Driver: "virtio_net"}}; !slices.Equal(r.NICs, want) {
		t.Errorf("NICs = %+v, want %+v", r.NICs, want)
	}
	if want := []Disk{{Disk: blockdev.Disk{Name: "sda", Size: 4 << 30}, Driver: "megaraid_sas"}}; !slices.Equal(r.Disks, want) {
		t.Errorf("Disks = %+v, want %+v", r.Disks, want)
	}
	want := []PCIDevice{
		{Address: "0000:00:05.0", Vendor: 0x10ec, Device: 0x8029, Class: 0x020000},
		{Address: "0000:00:06.0", Vendor: 0x1000, Device: 0x0054, Class: 0x010000},
	}
	if !slices.Equal(r.Unbound, want) {
		t.Errorf("Unbound = %+v, want %+v", r.Unbound, want)
	}
	if got := Describe(r.UnboundNetwork()); got != "10ec:8029 (Ethernet controller) at 0000:00:05.0" {
		t.Errorf("UnboundNetwork described as %q", got)
	}
	if !slices.Equal(r.IOMMUs, []string{"dmar0"}) {
		t.Errorf("IOMMUs = %q, want [dmar0]", r.IOMMUs)
	}
	var log bytes.Buffer
	r.Log(slog.New(slog.NewTextHandler(&log, nil)))
	for _, line := range []string{
		"IOMMU on: devices reach only the memory the kernel maps for them\" iommus=dmar0",
		"name=eth0 mac=52:54:00:12:34:56 driver=virtio_net",
		"name=sda driver=megaraid_sas size=4.0GiB",
		`"controllers this kernel has no driver for: 10ec:8029 (Ethernet controller) at 0000:00:05.0, 1000:0054 (SCSI controller) at 0000:00:06.0"`,
	} {
		if !strings.Contains(log.String(), line) {
			t.Errorf("the report's log has no %s:\n%s", line, log.String())
		}
	}
}

// TestNoIOMMU: a machine without an IOMMU says so, as a warning.
func TestNoIOMMU(t *testing.T) {
	s := sysfs{t: t, root: t.TempDir()}
	s.dir("class/net")
	s.dir("block")
	s.dir("bus/pci/devices")
	r, err := Scan(s.root)
	if err != nil || len(r.IOMMUs) != 0 {
		t.Fatalf("Scan = %+v, %v; want no IOMMUs", r, err)
	}
	var log bytes.Buffer
	r.Log(slog.New(slog.NewTextHandler(&log, nil)))
	if !strings.Contains(log.String(), "level=WARN msg=\"IOMMU off: ") {
		t.Errorf("the report's log has no IOMMU warning:\n%s", log.String())
	}
}

func TestScanBadInput(t *testing.T) {
	tests := []struct {
		name  string
		setup func(s sysfs)
		want  string
	}{
		{"no sysfs", func(s sysfs) {}, "listing network links"},
		{"class not hex", func(s sysfs) {
			s.dir("class/net")
			s.dir("block")
			s.pci("0000:00:05.0", "0x10ec", "0x8029", "network", "")
		}, `PCI device 0000:00:05.0: class "network"`},
		{"vendor missing", func(s sysfs) {
			s.dir("class/net")
			s.dir("block")
			s.file(pci+"0000:00:07.0/class", "0x020000")
			s.link("bus/pci/devices/0000:00:07.0", pci+"0000:00:07.0")
		}, "PCI device 0000:00:07.0: open"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := sysfs{t: t, root: t.TempDir()}
			tt.setup(s)
			_, err := Scan(filepath.Join(s.root))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Scan = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}
