//go:build boot

package boottest

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/diskfs/go-diskfs/partition/gpt"

	"github.com/borough-os/borough/esp"
	"github.com/borough-os/borough/internal/bootdisk"
	"github.com/borough-os/borough/internal/cmdline"
	"github.com/borough-os/borough/internal/partition"
	"github.com/borough-os/borough/internal/storage"
	"github.com/borough-os/borough/qemu"
)

const (
	created  = "borough: storage: data volume created and mounted"
	unlocked = "borough: storage: data volume unlocked and mounted"
	// ready: bring-up is over (the node is up, or failed and serves its
	// node API) and the node's services run.
	ready = "borough: node services started"
)

// marker is written to /data on first boot; it must never appear in the
// image's raw bytes.
const marker = "BOROUGH-PLAINTEXT-MARKER-5f3a9c"

func powerOff(t *testing.T, vm *qemu.VM) {
	t.Helper()
	if err := vm.PowerOff(powerTimeout); err != nil {
		t.Fatal(err)
	}
}

// TestStorage: without a TPM, first boot creates the volume (and warns
// that the key is in clear), a marker written to /data is read back after
// a reboot, and the image never holds the marker in clear.
func TestStorage(t *testing.T) {
	t.Parallel()
	img := nodeImage(t, cmdline.PoweroffOnFatal)
	state := t.TempDir()
	vm := boot(t, qemu.Options{Image: img, StateDir: state, TestParams: cmdline.TestMarker + "=" + marker})
	expect(t, vm, bootTimeout, "borough: init started",
		"esp=/dev/vda1 data=/dev/vda2 found_by="+bootdisk.FoundByLoader, "borough: no TPM found")
	expect(t, vm, stepTimeout, "the local unlock key is stored IN CLEAR", created,
		"borough: test: wrote marker", "borough: test: marker="+marker, ready)
	powerOff(t, vm)
	expectNotInImage(t, img, marker)

	vm = boot(t, qemu.Options{Image: img, StateDir: state, TestParams: cmdline.TestMarker})
	expect(t, vm, bootTimeout, unlocked, "borough: test: marker="+marker, ready)
	powerOff(t, vm)
}

// TestStorageTPM: with a TPM the key is sealed, a reboot with the same TPM
// unlocks, even when the TPM's driver let the TPM go before the node
// opened it, a data partition wiped under an ESP that kept its keys gets a
// new volume and none of the old keys, and a boot with another TPM stops
// with the reason and leaves the data partition as it was.
func TestStorageTPM(t *testing.T) {
	t.Parallel()
	img := nodeImage(t, cmdline.PoweroffOnFatal)
	state := t.TempDir()
	vm := boot(t, qemu.Options{Image: img, StateDir: state, TPM: true, TestParams: cmdline.TestMarker + "=" + marker})
	expect(t, vm, bootTimeout, "borough: TPM 2.0 found")
	expect(t, vm, stepTimeout, created, "borough: test: marker="+marker, ready)
	// What an update relies on to seal keys to a new boot binary; the
	// node checks it ten seconds after it runs.
	sawLine(t, vm, "borough: update: PCR 4 predicted from the event log and the boot binary matches the TPM's", stepTimeout)
	if strings.Contains(vm.Console(), "IN CLEAR") {
		t.Error("with a TPM, the node still stored the key in clear")
	}
	powerOff(t, vm)

	// This boot the TPM's driver has let it go, as after a probe that
	// failed: the node asks the kernel to probe it again.
	vm = boot(t, qemu.Options{Image: img, StateDir: state, TPM: true, TestParams: cmdline.TestMarker + " " + cmdline.TestUnbindTPM})
	expect(t, vm, bootTimeout, "borough: test: took the TPM from its driver",
		"borough: warning: TPM 2.0 found once the kernel was asked to probe it again", unlocked, "borough: test: marker="+marker, ready)
	powerOff(t, vm)
	expectNotInImage(t, img, marker)

	// The data partition wiped with the ESP kept: the new volume inherits
	// none of the old life's keys.
	wipeDataHeader(t, img)
	vm = boot(t, qemu.Options{Image: img, StateDir: state, TPM: true})
	expect(t, vm, bootTimeout, "the ESP holds the keys and records of an earlier life of this node",
		"borough: reset: advanced the TPM's epoch", created, ready)
	powerOff(t, vm)

	before := dataHash(t, img)
	vm = boot(t, qemu.Options{Image: img, TPM: true})
	expect(t, vm, bootTimeout, "borough: error: fatal: unsealing the local unlock key",
		"this disk was set up on another machine", "borough: powering off")
	if err := vm.Wait(powerTimeout); err != nil {
		t.Fatal(err)
	}
	if dataHash(t, img) != before {
		t.Error("the failed boot with another TPM changed the data partition")
	}
}

// TestStorageCrash kills the VM after each first-boot step; the next boot
// must end with a mounted volume, formatting afresh only if the header was
// not yet committed, and never once it was.
func TestStorageCrash(t *testing.T) {
	for _, tc := range []struct {
		step string
		want []string
	}{
		{storage.StepKeys, []string{created}},
		{storage.StepIntent, []string{"formatting it afresh", created}},
		{storage.StepMkfs, []string{"formatting it afresh", created}},
		{storage.StepHeader, []string{unlocked}},
	} {
		t.Run(tc.step, func(t *testing.T) {
			t.Parallel()
			img := nodeImage(t, cmdline.PoweroffOnFatal)
			state := t.TempDir()
			vm := boot(t, qemu.Options{Image: img, StateDir: state, TestParams: cmdline.TestPause + "=" + tc.step})
			expect(t, vm, bootTimeout, "borough: test: paused after storage step "+tc.step)
			vm.Kill()

			vm = boot(t, qemu.Options{Image: img, StateDir: state, TestParams: cmdline.TestMarker + "=" + marker})
			expect(t, vm, bootTimeout, tc.want...)
			expect(t, vm, stepTimeout, "borough: test: marker="+marker, ready)
			if tc.step == storage.StepHeader && strings.Contains(vm.Console(), created) {
				t.Error("the volume was formatted again after its header was committed")
			}
			powerOff(t, vm)
		})
	}
}

// TestStorageGrow boots an image written to a 4 GiB disk: the data
// partition must grow to the end, with a valid GPT.
func TestStorageGrow(t *testing.T) {
	t.Parallel()
	img := nodeImage(t, cmdline.PoweroffOnFatal)
	if err := os.Truncate(img, 4<<30); err != nil {
		t.Fatal(err)
	}
	vm := boot(t, qemu.Options{Image: img})
	// The data partition holds all but the ESP and the 1 MiB at each end
	// (alignment, which holds the GPTs).
	grown := fmt.Sprintf("size=%.1fGiB", float64(4<<30-esp.Size-2<<20)/(1<<30))
	expect(t, vm, bootTimeout, "borough: storage: grew data partition to fill the disk "+grown, created, ready)
	powerOff(t, vm)

	out, err := exec.Command("sgdisk", "-v", img).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "No problems found") {
		t.Errorf("sgdisk -v after growing: %v\n%s", err, out)
	}
	data := dataPartition(t, img)
	if end := int64(data.End+1) * 512; end < 4<<30-2<<20 {
		t.Errorf("data partition ends at %d bytes, want within 2 MiB of 4 GiB", end)
	}
}

// dataPartition reads the image's GPT and returns the data partition.
func dataPartition(t *testing.T, img string) *gpt.Partition {
	t.Helper()
	return findPartition(t, img, partition.DataType)
}

// findPartition returns the image's partition of type typ.
func findPartition(t *testing.T, img, typ string) *gpt.Partition {
	t.Helper()
	f, err := os.Open(img)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	table, err := gpt.Read(f, 512, 512)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range table.Partitions {
		if strings.EqualFold(string(p.Type), typ) {
			return p
		}
	}
	t.Fatalf("image has no partition of type %s", typ)
	return nil
}

// writeESPFile replaces a file on the image's ESP with content, as a
// power cut during a FAT write may leave it (mtools, on the image).
func writeESPFile(t *testing.T, img string, f esp.File, content []byte) {
	t.Helper()
	src := filepath.Join(t.TempDir(), "content")
	if err := os.WriteFile(src, content, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mcopy", "-o", "-i", espTarget(t, img), src, "::/"+string(f)).CombinedOutput(); err != nil {
		t.Fatalf("mcopy to the ESP: %v\n%s", err, out)
	}
}

// removeESPFile deletes a file from the image's ESP (mtools).
func removeESPFile(t *testing.T, img string, f esp.File) {
	t.Helper()
	if out, err := exec.Command("mdel", "-i", espTarget(t, img), "::/"+string(f)).CombinedOutput(); err != nil {
		t.Fatalf("mdel %s: %v\n%s", f, err, out)
	}
}

// readESPFile returns a file on the image's ESP (mtools).
func readESPFile(t *testing.T, img string, f esp.File) []byte {
	t.Helper()
	out, err := exec.Command("mtype", "-i", espTarget(t, img), "::/"+string(f)).Output()
	if err != nil {
		t.Fatalf("mtype %s: %v", f, err)
	}
	return out
}

// espTarget names the image's ESP for mtools' -i.
func espTarget(t *testing.T, img string) string {
	return fmt.Sprintf("%s@@%d", img, findPartition(t, img, partition.ESPType).Start*512)
}

// dataSection reads the image's data partition; it is closed when the
// test ends.
func dataSection(t *testing.T, img string) *io.SectionReader {
	t.Helper()
	p := dataPartition(t, img)
	f, err := os.Open(img)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return io.NewSectionReader(f, int64(p.Start)*512, int64(p.End-p.Start+1)*512)
}

// wipeDataHeader zeroes the start of the image's data partition, where
// its volume header is: the partition reads as empty.
func wipeDataHeader(t *testing.T, img string) {
	t.Helper()
	p := dataPartition(t, img)
	f, err := os.OpenFile(img, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(make([]byte, 2<<20), int64(p.Start)*512); err != nil {
		t.Fatal(err)
	}
}

// dataHash hashes the image's data partition.
func dataHash(t *testing.T, img string) [32]byte {
	t.Helper()
	h := sha256.New()
	if _, err := io.Copy(h, dataSection(t, img)); err != nil {
		t.Fatal(err)
	}
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	return sum
}

// expectNotInImage fails if s appears anywhere in the image's bytes.
func expectNotInImage(t *testing.T, img, s string) {
	t.Helper()
	held, err := inImage(img, []byte(s))
	if err != nil {
		t.Fatal(err)
	}
	if held {
		t.Fatalf("the image %s holds %q in clear", filepath.Base(img), s)
	}
}

// inImage says whether the image img holds b anywhere in its bytes.
func inImage(img string, b []byte) (bool, error) {
	f, err := os.Open(img)
	if err != nil {
		return false, err
	}
	defer f.Close()
	buf := make([]byte, 8<<20)
	var tail []byte
	for {
		n, err := f.Read(buf)
		chunk := append(tail, buf[:n]...)
		if bytes.Contains(chunk, b) {
			return true, nil
		}
		if len(chunk) >= len(b) {
			tail = append([]byte{}, chunk[len(chunk)-len(b)+1:]...)
		}
		if err == io.EOF {
			return false, nil
		}
		if err != nil {
			return false, err
		}
	}
}
