package image

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"debug/pe"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	diskfs "github.com/diskfs/go-diskfs"
	"github.com/diskfs/go-diskfs/partition/gpt"

	"github.com/borough-os/borough/esp"
	"github.com/borough-os/borough/internal/partition"
	"github.com/borough-os/borough/internal/uki"
)

func TestNewPlan(t *testing.T) {
	boot := []byte("boot")
	for _, tc := range []struct {
		name    string
		size    int64
		wantErr string
		want    Plan
	}{
		{name: "default", size: DefaultSize, want: Plan{
			ESPStart: 2048, ESPEnd: 2048 + 614400 - 1,
			DataStart: 616448, DataEnd: 2097152 - 2048 - 1,
		}},
		{name: "minimum", size: MinSize, want: Plan{
			ESPStart: 2048, ESPEnd: 616447,
			DataStart: 616448, DataEnd: uint64(MinSize)/512 - 2048 - 1,
		}},
		{name: "too small", size: MinSize - alignment, wantErr: "below the minimum"},
		{name: "unaligned", size: DefaultSize + 512, wantErr: "multiple of 1 MiB"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := NewPlan(Params{BootBinary: boot, Size: tc.size})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("NewPlan = %v, want error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got.DiskGUID, got.ESPGUID, got.DataGUID = "", "", ""
			if got != tc.want {
				t.Errorf("NewPlan = %+v, want %+v", got, tc.want)
			}
			if (got.DataEnd-got.DataStart+1)*512 < MinDataSize {
				t.Errorf("data partition is below MinDataSize")
			}
		})
	}
	if _, err := NewPlan(Params{Size: DefaultSize}); err == nil {
		t.Error("NewPlan with no boot binary succeeded")
	}
	if _, err := NewPlan(Params{BootBinary: make([]byte, esp.Size/2+1), Size: DefaultSize}); err == nil {
		t.Error("NewPlan with an oversized boot binary succeeded")
	}
}

func TestGUIDsFollowInputs(t *testing.T) {
	a, _ := NewPlan(Params{BootBinary: []byte("a"), Size: DefaultSize})
	a2, _ := NewPlan(Params{BootBinary: []byte("a"), Size: DefaultSize})
	b, _ := NewPlan(Params{BootBinary: []byte("b"), Size: DefaultSize})
	c, _ := NewPlan(Params{BootBinary: []byte("a"), Size: 2 * DefaultSize})
	if a != a2 {
		t.Error("the same inputs gave different GUIDs")
	}
	if a.DiskGUID == b.DiskGUID || a.DiskGUID == c.DiskGUID || a.ESPGUID == b.ESPGUID || a.DataGUID == c.DataGUID {
		t.Error("different inputs gave the same GUIDs")
	}
	if a.DiskGUID == a.ESPGUID || a.ESPGUID == a.DataGUID {
		t.Error("one image's GUIDs repeat")
	}
}

func buildTestImage(t *testing.T, boot []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "disk.img")
	if err := Build(path, Params{BootBinary: boot, Size: DefaultSize}); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestBuild(t *testing.T) {
	boot := make([]byte, 7<<20+123)
	rand.Read(boot)
	path := buildTestImage(t, boot)

	out, err := exec.Command("sgdisk", "-v", path).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "No problems found") {
		t.Errorf("sgdisk -v: %v\n%s", err, out)
	}

	d, err := diskfs.Open(path, diskfs.WithOpenMode(diskfs.ReadOnly))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	pt, err := d.GetPartitionTable()
	if err != nil {
		t.Fatal(err)
	}
	table := pt.(*gpt.Table)
	if !table.ProtectiveMBR {
		t.Error("no protective MBR")
	}
	want := []struct {
		typ  gpt.Type
		name string
	}{{partition.ESPType, partition.ESPName}, {partition.DataType, partition.DataName}}
	if len(table.Partitions) != len(want) {
		t.Fatalf("%d partitions, want %d", len(table.Partitions), len(want))
	}
	for i, w := range want {
		p := table.Partitions[i]
		if !strings.EqualFold(string(p.Type), string(w.typ)) || p.Name != w.name {
			t.Errorf("partition %d = type %s name %q, want %s %q", i+1, p.Type, p.Name, w.typ, w.name)
		}
	}

	fs, err := d.GetFilesystem(1)
	if err != nil {
		t.Fatal(err)
	}
	f, err := fs.OpenFile("/"+string(esp.BootBinary), os.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, boot) {
		t.Errorf("%s on the ESP differs from the boot binary", esp.BootBinary)
	}

	// The reference FAT checker must accept the ESP.
	espImg := filepath.Join(t.TempDir(), "esp.img")
	if out, err := exec.Command("dd", "if="+path, "of="+espImg, "bs=1M", "skip=1", "count="+strconv.Itoa(esp.Size>>20)).CombinedOutput(); err != nil {
		t.Fatalf("dd: %v\n%s", err, out)
	}
	if out, err := exec.Command("fsck.vfat", "-n", espImg).CombinedOutput(); err != nil {
		t.Errorf("fsck.vfat -n: %v\n%s", err, out)
	}

	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	if allocated := st.Blocks * 512; allocated > 64<<20 {
		t.Errorf("image allocates %d MiB, want a sparse image under 64 MiB", allocated>>20)
	}
}

func TestBuildIsReproducible(t *testing.T) {
	boot := bytes.Repeat([]byte("borough"), 100000)
	sum := func(path string) [32]byte {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return sha256.Sum256(b)
	}
	if sum(buildTestImage(t, boot)) != sum(buildTestImage(t, boot)) {
		t.Error("two builds from the same inputs differ")
	}
}

func TestBootBinary(t *testing.T) {
	stub, err := os.ReadFile(uki.DebianStub)
	if err != nil {
		t.Fatalf("reading the EFI stub (apt-get install systemd-boot-efi): %v", err)
	}
	b, err := BootBinary(BootParams{Stub: stub, Kernel: []byte("kernel"), Initramfs: []byte("initrd"),
		Cmdline: DefaultCmdline, Version: "1.2.3"})
	if err != nil {
		t.Fatal(err)
	}
	f, err := pe.NewFile(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{
		uki.SectionLinux:   "kernel",
		uki.SectionInitrd:  "initrd",
		uki.SectionCmdline: DefaultCmdline,
		uki.SectionOSRel:   "NAME=Borough\nID=borough\nPRETTY_NAME=\"Borough 1.2.3\"\nVERSION_ID=\"1.2.3\"\n",
	} {
		s := f.Section(name)
		if s == nil {
			t.Errorf("no %s section", name)
			continue
		}
		data, _ := s.Data()
		if got := string(data[:s.VirtualSize]); !strings.HasPrefix(got, want) {
			t.Errorf("%s = %q, want it to start with %q", name, got, want)
		}
	}
	if _, err := BootBinary(BootParams{Stub: stub, Version: "bad\"version"}); err == nil {
		t.Error("a version with a quote was accepted")
	}
}
