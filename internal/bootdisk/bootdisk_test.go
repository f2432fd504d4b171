package bootdisk

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unicode/utf16"

	diskfs "github.com/diskfs/go-diskfs"
	"github.com/diskfs/go-diskfs/partition/gpt"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/borough-os/borough/image"
	"github.com/borough-os/borough/internal/efivar"
	"github.com/borough-os/borough/internal/partition"
)

// Fixed GUIDs of the hand-made GPT images.
const (
	otherDiskGUID = "6F1D3C52-0B8A-4E59-9C27-3A5E8D0F1B01"
	otherESPGUID  = "6F1D3C52-0B8A-4E59-9C27-3A5E8D0F1B02"
	otherRootGUID = "6F1D3C52-0B8A-4E59-9C27-3A5E8D0F1B03"
	twoDataGUID   = "6F1D3C52-0B8A-4E59-9C27-3A5E8D0F1B04"
	noESPGUID     = "6F1D3C52-0B8A-4E59-9C27-3A5E8D0F1B05"
	// unknownGUID is on no disk.
	unknownGUID = "0d2f7c1e-5a4b-4c3d-8e9f-a0b1c2d3e4f5"
)

// testImage is a disk image file and what FindDisk should see in it.
type testImage struct {
	path string
	size int64
	// diskGUID and espGUID are upper-case, as go-diskfs reads them.
	diskGUID, espGUID string
}

// boroughImage writes a Borough image made by package image; boot
// varies the GUIDs (they derive from the boot binary).
func boroughImage(t *testing.T, dir, name, boot string) testImage {
	t.Helper()
	p := image.Params{BootBinary: []byte(boot), Size: image.DefaultSize}
	plan, err := image.NewPlan(p)
	if err != nil {
		t.Fatal(err)
	}
	// Build sets SOURCE_DATE_EPOCH in the process environment; t.Setenv
	// restores it after the test.
	t.Setenv("SOURCE_DATE_EPOCH", "0")
	path := filepath.Join(dir, name)
	if err := image.Build(path, p); err != nil {
		t.Fatalf("building image: %v", err)
	}
	return testImage{
		path:     path,
		size:     p.Size,
		diskGUID: strings.ToUpper(plan.DiskGUID),
		espGUID:  strings.ToUpper(plan.ESPGUID),
	}
}

// gptImage writes a sparse 64 MiB GPT disk image with the given
// partitions (1 MiB each, from 1 MiB).
func gptImage(t *testing.T, dir, name, diskGUID string, parts ...*gpt.Partition) testImage {
	t.Helper()
	const size = 64 << 20
	path := filepath.Join(dir, name)
	d, err := diskfs.Create(path, size, 512)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for i, p := range parts {
		p.Index = i + 1
		p.Start = uint64(2048 * (i + 1))
		p.End = p.Start + 2047
	}
	table := &gpt.Table{
		LogicalSectorSize:  512,
		PhysicalSectorSize: 512,
		ProtectiveMBR:      true,
		GUID:               diskGUID,
		Partitions:         parts,
	}
	if err := d.Partition(table); err != nil {
		t.Fatalf("writing GPT to %s: %v", path, err)
	}
	return testImage{path: path, size: size, diskGUID: diskGUID}
}

// zeroImage writes a 1 MiB file of zeros: a disk with no partition table.
func zeroImage(t *testing.T, dir, name string) testImage {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	return testImage{path: path, size: 1 << 20}
}

// loaderDevicePartUUID is the efivarfs file of LoaderDevicePartUUID.
const loaderDevicePartUUID = "LoaderDevicePartUUID-" + loaderVendor

// fakeDisk is a disk in a fake sysfs and /dev.
type fakeDisk struct {
	name string
	img  testImage
	// parts are the kernel's names of partitions 1, 2, ...; "" leaves
	// that partition out of sysfs.
	parts []string
}

// fakeMachine lays out sysRoot/block and devRoot for disks, and an
// efivars directory holding LoaderDevicePartUUID = loaderGUID unless it
// is "".
func fakeMachine(t *testing.T, disks []fakeDisk, loaderGUID string) (sysRoot, devRoot, efivars string) {
	t.Helper()
	root := t.TempDir()
	sysRoot = filepath.Join(root, "sys")
	devRoot = filepath.Join(root, "dev")
	efivars = filepath.Join(root, "efivars")
	for _, dir := range []string{filepath.Join(sysRoot, "block"), devRoot, efivars} {
		mkdir(t, dir)
	}
	for _, d := range disks {
		dir := filepath.Join(sysRoot, "block", d.name)
		mkdir(t, dir)
		writeFile(t, filepath.Join(dir, "size"), []byte(strconv.FormatInt(d.img.size/512, 10)+"\n"))
		// sysfs has other directories beside the partitions.
		mkdir(t, filepath.Join(dir, "queue"))
		for i, p := range d.parts {
			if p == "" {
				continue
			}
			mkdir(t, filepath.Join(dir, p))
			writeFile(t, filepath.Join(dir, p, "partition"), []byte(strconv.Itoa(i+1)+"\n"))
		}
		if err := os.Symlink(d.img.path, filepath.Join(devRoot, d.name)); err != nil {
			t.Fatal(err)
		}
	}
	if loaderGUID != "" {
		writeFile(t, filepath.Join(efivars, loaderDevicePartUUID), loaderVar(loaderGUID))
	}
	return sysRoot, devRoot, efivars
}

// loaderVar encodes guid as systemd's stub writes LoaderDevicePartUUID:
// 4 bytes of attributes, then NUL-terminated UTF-16LE.
func loaderVar(guid string) []byte {
	b := []byte{0x06, 0, 0, 0}
	for _, c := range utf16.Encode([]rune(guid + "\x00")) {
		b = append(b, byte(c), byte(c>>8))
	}
	return b
}

func mkdir(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestFindDisk(t *testing.T) {
	imgs := t.TempDir()
	a := boroughImage(t, imgs, "a.img", "boot binary a")
	b := boroughImage(t, imgs, "b.img", "boot binary b")
	other := gptImage(t, imgs, "other.img", otherDiskGUID,
		&gpt.Partition{Type: partition.ESPType, Name: "EFI", GUID: otherESPGUID},
		&gpt.Partition{Type: gpt.LinuxFilesystem, Name: "root", GUID: otherRootGUID})
	other.espGUID = otherESPGUID
	twoData := gptImage(t, imgs, "twodata.img", twoDataGUID,
		&gpt.Partition{Type: partition.ESPType, Name: partition.ESPName},
		&gpt.Partition{Type: partition.DataType, Name: partition.DataName},
		&gpt.Partition{Type: partition.DataType, Name: partition.DataName})
	noESP := gptImage(t, imgs, "noesp.img", noESPGUID,
		&gpt.Partition{Type: gpt.LinuxFilesystem, Name: "root"},
		&gpt.Partition{Type: partition.DataType, Name: partition.DataName})
	zeros := zeroImage(t, imgs, "zeros.img")
	if a.espGUID == b.espGUID {
		t.Fatalf("images a and b have the same ESP GUID %s", a.espGUID)
	}

	// want describes the expected Disk with names relative to devRoot.
	type want struct {
		name, esp, data string
		img             testImage
		dataIndex       int
		foundBy         string
	}
	for _, tc := range []struct {
		name       string
		disks      []fakeDisk
		loaderGUID string
		want       *want
		// wantErr are substrings of the expected error.
		wantErr []string
	}{
		{
			name: "loader names the second of two Borough disks",
			disks: []fakeDisk{
				{"vda", a, []string{"vda1", "vda2"}},
				{"vdb", b, []string{"vdb1", "vdb2"}},
			},
			loaderGUID: strings.ToLower(b.espGUID),
			want:       &want{"vdb", "vdb1", "vdb2", b, 2, FoundByLoader},
		},
		{
			name: "loader names the first of two Borough disks, upper case",
			disks: []fakeDisk{
				{"vda", a, []string{"vda1", "vda2"}},
				{"vdb", b, []string{"vdb1", "vdb2"}},
			},
			loaderGUID: a.espGUID,
			want:       &want{"vda", "vda1", "vda2", a, 2, FoundByLoader},
		},
		{
			name: "loader names a Borough disk among others",
			disks: []fakeDisk{
				{"sda", zeros, nil},
				{"vda", other, []string{"vda1", "vda2"}},
				{"vdb", b, []string{"vdb1", "vdb2"}},
			},
			loaderGUID: b.espGUID,
			want:       &want{"vdb", "vdb1", "vdb2", b, 2, FoundByLoader},
		},
		{
			name: "only Borough disk among others, no efivar",
			disks: []fakeDisk{
				{"sda", zeros, nil},
				{"vda", other, []string{"vda1", "vda2"}},
				{"vdc", a, []string{"vdc1", "vdc2"}},
			},
			want: &want{"vdc", "vdc1", "vdc2", a, 2, FoundByDataPartition},
		},
		{
			name: "efivar names an unknown GUID, one Borough disk",
			disks: []fakeDisk{
				{"vda", other, []string{"vda1", "vda2"}},
				{"vdb", a, []string{"vdb1", "vdb2"}},
			},
			loaderGUID: unknownGUID,
			want:       &want{"vdb", "vdb1", "vdb2", a, 2, FoundByDataPartition},
		},
		{
			name: "nvme",
			disks: []fakeDisk{
				{"nvme0n1", a, []string{"nvme0n1p1", "nvme0n1p2"}},
			},
			loaderGUID: a.espGUID,
			want:       &want{"nvme0n1", "nvme0n1p1", "nvme0n1p2", a, 2, FoundByLoader},
		},
		{
			name: "nvme, no efivar",
			disks: []fakeDisk{
				{"nvme0n1", a, []string{"nvme0n1p1", "nvme0n1p2"}},
				{"nvme1n1", other, []string{"nvme1n1p1", "nvme1n1p2"}},
			},
			want: &want{"nvme0n1", "nvme0n1p1", "nvme0n1p2", a, 2, FoundByDataPartition},
		},
		{
			name: "two Borough disks, no efivar",
			disks: []fakeDisk{
				{"vda", a, []string{"vda1", "vda2"}},
				{"vdb", b, []string{"vdb1", "vdb2"}},
			},
			wantErr: []string{"the firmware did not name the boot ESP, and several disks have a Borough data partition (vda, vdb)"},
		},
		{
			// The error must name the GUID the firmware gave, not say it
			// gave none.
			name: "two Borough disks, efivar names neither",
			disks: []fakeDisk{
				{"vda", a, []string{"vda1", "vda2"}},
				{"vdb", b, []string{"vdb1", "vdb2"}},
			},
			loaderGUID: unknownGUID,
			wantErr: []string{"the boot ESP " + strings.ToUpper(unknownGUID) + " (LoaderDevicePartUUID) is on no disk, " +
				"and several disks have a Borough data partition (vda, vdb)"},
		},
		{
			// The image's GUIDs derive from the boot binary and size, so
			// two disks written from one image share them.
			name: "efivar names a GUID on two disks written from one image",
			disks: []fakeDisk{
				{"sda", a, []string{"sda1", "sda2"}},
				{"vda", a, []string{"vda1", "vda2"}},
			},
			loaderGUID: a.espGUID,
			wantErr:    []string{"the boot ESP " + a.espGUID + " is on several disks (sda, vda)", "same image"},
		},
		{
			name: "efivar names a GUID on two disks among three",
			disks: []fakeDisk{
				{"vda", a, []string{"vda1", "vda2"}},
				{"vdb", b, []string{"vdb1", "vdb2"}},
				{"vdc", a, []string{"vdc1", "vdc2"}},
			},
			loaderGUID: strings.ToLower(a.espGUID),
			wantErr:    []string{"several disks (vda, vdc)"},
		},
		{
			// The copies share a GUID, but the firmware booted the
			// other disk: that one is unambiguous.
			name: "efivar names a disk beside two written from one image",
			disks: []fakeDisk{
				{"vda", a, []string{"vda1", "vda2"}},
				{"vdb", a, []string{"vdb1", "vdb2"}},
				{"vdc", b, []string{"vdc1", "vdc2"}},
			},
			loaderGUID: b.espGUID,
			want:       &want{"vdc", "vdc1", "vdc2", b, 2, FoundByLoader},
		},
		{
			name: "two disks written from one image, no efivar",
			disks: []fakeDisk{
				{"vda", a, []string{"vda1", "vda2"}},
				{"vdb", a, []string{"vdb1", "vdb2"}},
			},
			wantErr: []string{"the firmware did not name the boot ESP, and several disks have a Borough data partition (vda, vdb)"},
		},
		{
			name: "no Borough disk",
			disks: []fakeDisk{
				{"sda", zeros, nil},
				{"vda", other, []string{"vda1", "vda2"}},
			},
			wantErr: []string{"no disk has a Borough data partition"},
		},
		{
			name:    "no disks at all",
			wantErr: []string{"no disk has a Borough data partition"},
		},
		{
			name: "efivar names a GUID on no disk, no Borough disk",
			disks: []fakeDisk{
				{"sda", zeros, nil},
				{"vda", other, []string{"vda1", "vda2"}},
			},
			loaderGUID: unknownGUID,
			wantErr:    []string{strings.ToUpper(unknownGUID), "LoaderDevicePartUUID"},
		},
		{
			// The firmware booted another OS's ESP: storage must not
			// take that disk for Borough's.
			name: "efivar names a non-Borough ESP",
			disks: []fakeDisk{
				{"vda", other, []string{"vda1", "vda2"}},
			},
			loaderGUID: other.espGUID,
			wantErr:    []string{"vda has no Borough data partition"},
		},
		{
			name: "sysfs lists no partitions of the Borough disk",
			disks: []fakeDisk{
				{"vda", a, nil},
			},
			wantErr: []string{"no partition 1 on vda"},
		},
		{
			name: "sysfs lacks the data partition",
			disks: []fakeDisk{
				{"vda", a, []string{"vda1"}},
			},
			loaderGUID: a.espGUID,
			wantErr:    []string{"no partition 2 on vda"},
		},
		{
			name: "two data partitions on the boot disk",
			disks: []fakeDisk{
				{"vda", twoData, []string{"vda1", "vda2", "vda3"}},
			},
			wantErr: []string{"vda has 2 partitions of type " + partition.DataType},
		},
		{
			name: "boot disk without an ESP",
			disks: []fakeDisk{
				{"vda", noESP, []string{"vda1", "vda2"}},
			},
			wantErr: []string{"vda has no EFI system partition"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sysRoot, devRoot, efivars := fakeMachine(t, tc.disks, tc.loaderGUID)
			got, err := FindDisk(sysRoot, devRoot, efivars)
			if tc.wantErr != nil {
				if err == nil {
					t.Fatalf("FindDisk = %+v, want an error containing %q", got, tc.wantErr)
				}
				for _, s := range tc.wantErr {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("FindDisk error %q does not contain %q", err, s)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("FindDisk: %v", err)
			}
			w := tc.want
			want := &Disk{
				Name:      w.name,
				Path:      filepath.Join(devRoot, w.name),
				Size:      w.img.size,
				ESP:       filepath.Join(devRoot, w.esp),
				Data:      filepath.Join(devRoot, w.data),
				DataIndex: w.dataIndex,
				FoundBy:   w.foundBy,
			}
			if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(Disk{}, "Table")); diff != "" {
				t.Errorf("FindDisk (-want +got):\n%s", diff)
			}
			if got.Table == nil {
				t.Fatal("FindDisk returned no GPT")
			}
			if got.Table.GUID != w.img.diskGUID {
				t.Errorf("FindDisk returned the GPT of disk %s, want %s", got.Table.GUID, w.img.diskGUID)
			}
		})
	}
}

func TestBootESP(t *testing.T) {
	const guid = "1b4e28ba-2fa1-11d2-883f-0016d3cca427"
	const upper = "1B4E28BA-2FA1-11D2-883F-0016D3CCA427"
	for _, tc := range []struct {
		name string
		// content of the efivar; nil: no file.
		content []byte
		want    string
	}{
		{"lower case", loaderVar(guid), upper},
		{"upper case", loaderVar(upper), upper},
		{"no variable", nil, ""},
		{"shorter than the attributes", []byte{0x06, 0, 0}, ""},
		{"empty file", []byte{}, ""},
		{"attributes only", []byte{0x06, 0, 0, 0}, ""},
		{"empty string", []byte{0x06, 0, 0, 0, 0, 0}, ""},
		{"no NUL terminator", loaderVar(guid)[:4+2*len(guid)], upper},
		{"odd trailing byte", append(loaderVar(guid)[:4+2*len(guid)], 'x'), upper},
		{"text after the NUL", append(loaderVar(guid), 'x', 0, 'y', 0), upper},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if tc.content != nil {
				writeFile(t, filepath.Join(dir, loaderDevicePartUUID), tc.content)
			}
			if got := bootESP(dir); got != tc.want {
				t.Errorf("bootESP = %q, want %q", got, tc.want)
			}
		})
	}
	t.Run("no efivars directory", func(t *testing.T) {
		if got := bootESP(filepath.Join(t.TempDir(), "missing")); got != "" {
			t.Errorf("bootESP = %q, want \"\"", got)
		}
	})
}

// TestFindDiskByBootEntry: two disks written from one image share their
// ESP's GUID; the firmware's boot entry names the PCI function it booted
// from, which picks one.
func TestFindDiskByBootEntry(t *testing.T) {
	a := boroughImage(t, t.TempDir(), "a.img", "boot binary a")
	pci := map[string]string{
		"vda": "pci0000:00/0000:00:03.0/virtio1",
		"vdb": "pci0000:00/0000:00:1c.0/0000:01:00.0/virtio2",
	}
	for _, tc := range []struct {
		name    string
		nodes   [][2]byte // PCI device, function on the boot entry's path
		want    string
		wantErr string
	}{
		{"first disk", [][2]byte{{3, 0}}, "vda", ""},
		{"behind a bridge", [][2]byte{{0x1c, 0}, {0, 0}}, "vdb", ""},
		{"another controller", [][2]byte{{5, 0}}, "", "the boot entry does not tell which"},
		{"no PCI path", nil, "", "the boot entry does not tell which"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			disks := []fakeDisk{{"vda", a, []string{"vda1", "vda2"}}, {"vdb", a, []string{"vdb1", "vdb2"}}}
			sysRoot, devRoot, efivars := fakeMachine(t, disks, a.espGUID)
			for name, path := range pci {
				dir := filepath.Join(sysRoot, "devices", path, "block", name)
				mkdir(t, filepath.Dir(dir))
				if err := os.Rename(filepath.Join(sysRoot, "block", name), dir); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink(dir, filepath.Join(sysRoot, "block", name)); err != nil {
					t.Fatal(err)
				}
			}
			// Boot0001: PciRoot(0x0)/Pci(...)/..., then the end node.
			path := []byte{2, 1, 12, 0, 0xd0, 0x41, 0x03, 0x0a, 0, 0, 0, 0}
			for _, n := range tc.nodes {
				path = append(path, 1, 1, 6, 0, n[1], n[0])
			}
			path = append(path, 0x7f, 0xff, 4, 0)
			entry := append([]byte{1, 0, 0, 0, byte(len(path)), 0, 0, 0}, path...)
			if err := efivar.Write(efivars, "Boot0001", efivar.GlobalVariable, efivar.BootVariable, entry); err != nil {
				t.Fatal(err)
			}
			if err := efivar.Write(efivars, "BootCurrent", efivar.GlobalVariable, efivar.BootVariable, []byte{1, 0}); err != nil {
				t.Fatal(err)
			}
			got, err := FindDisk(sysRoot, devRoot, efivars)
			switch {
			case tc.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("FindDisk = %v, %v; want an error containing %q", got, err, tc.wantErr)
				}
			case err != nil:
				t.Fatal(err)
			case got.Name != tc.want || got.FoundBy != FoundByBootEntry || got.ESP != filepath.Join(devRoot, tc.want+"1"):
				t.Errorf("FindDisk = %s (ESP %s, found by %s), want %s by the boot entry", got.Name, got.ESP, got.FoundBy, tc.want)
			}
		})
	}
}
