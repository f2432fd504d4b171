package qemu

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestVolatileDisk writes through the served disk with and without a
// flush, then cuts the power: only the flushed write is on the image.
func TestVolatileDisk(t *testing.T) {
	for _, tc := range []struct {
		name  string
		flush bool
		want  byte
	}{
		{"unflushed write lost", false, 0},
		{"flushed write kept", true, 0xab},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			image := filepath.Join(dir, "disk.img")
			if err := os.WriteFile(image, make([]byte, 1<<20), 0o600); err != nil {
				t.Fatal(err)
			}
			o := Options{StateDir: dir, VolatileCache: true}
			d, err := o.startServedDisk(context.Background(), image, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer d.cut()
			// qemu-io's writeback mode (-t) leaves flushing to the
			// client, as a guest with a write cache does; it then
			// crashes (abort), so that it does not flush as it closes.
			args := []string{"-t", "writeback", "-f", "raw", "-c", "write -P 0xab 0 64k"}
			if tc.flush {
				args = append(args, "-c", "flush")
			}
			args = append(args, "-c", "abort", "nbd+unix:///?socket="+d.socket)
			// Its output is lost with the abort; the flushed case shows
			// that the write was made.
			out, err := exec.Command("qemu-io", args...).CombinedOutput()
			if err == nil || err.Error() != "signal: aborted" {
				t.Fatalf("qemu-io (apt-get install qemu-utils): %v, want it aborted\n%s", err, out)
			}
			d.cut()
			b, err := os.ReadFile(image)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(b[:64<<10], bytes.Repeat([]byte{tc.want}, 64<<10)) {
				t.Errorf("the image's first 64 KiB after the cut begin %x, want all %#x", b[:8], tc.want)
			}
		})
	}
}

// TestDiskFaults reads and writes a disk served with nbdkit's error,
// rate and delay filters: it works, fails with EIO while its fail file is
// there, works again once it is gone, is slow while throttled and quick
// again once it is not, and every request that works waits the delay (a
// failing one fails first).
func TestDiskFaults(t *testing.T) {
	dir := t.TempDir()
	image := filepath.Join(dir, "disk.img")
	if err := os.WriteFile(image, make([]byte, 8<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	o := Options{StateDir: dir, DiskFaults: true, SlowDisk: 200 * time.Millisecond}
	vm := &VM{opts: o}
	d, err := o.startServedDisk(context.Background(), image, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer d.cut()
	io := func(op string) (string, time.Duration, error) {
		start := time.Now()
		out, err := exec.Command("qemu-io", "-f", "raw", "-c", op, "nbd+unix:///?socket="+d.socket).CombinedOutput()
		return string(out), time.Since(start), err
	}
	// A MiB at 4 Mbit/s takes 2 s; at full speed, in a served file, a
	// few milliseconds: the bounds below leave a wide margin either way.
	const throttle = 4 << 20
	var rate int64
	for _, tc := range []struct {
		name    string
		failing bool
		rate    int64
		op      string
		fails   bool
		// least and most bound how long the request takes (most 0: no
		// bound); the least is always the disk's delay.
		least, most time.Duration
	}{
		{"a read", false, 0, "read 0 64k", false, 0, 0},
		{"a write", false, 0, "write -P 0xab 0 64k", false, 0, 0},
		{"a read of a failing disk", true, 0, "read 0 64k", true, 0, 0},
		{"a write to a failing disk", true, 0, "write -P 0xcd 0 64k", true, 0, 0},
		{"a read once it works again", false, 0, "read -P 0xab 0 64k", false, 0, 0},
		{"a write to a throttled disk", false, throttle, "write -P 0xef 1M 2M", false, 2 * time.Second, 0},
		{"a write once it is not", false, 0, "write -P 0xef 4M 4M", false, 0, 4 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := vm.FailDisks(tc.failing); err != nil {
				t.Fatal(err)
			}
			if tc.rate != rate {
				if err := vm.ThrottleDisks(tc.rate); err != nil {
					t.Fatal(err)
				}
				rate = tc.rate
				time.Sleep(1500 * time.Millisecond) // requests already waiting finish their wait at the old rate
			}
			out, took, err := io(tc.op)
			failed := err != nil || strings.Contains(out, "Input/output error") || strings.Contains(out, "Pattern verification failed")
			if failed != tc.fails {
				t.Errorf("qemu-io %q (apt-get install qemu-utils nbdkit): failed %v, want %v: %v\n%s", tc.op, failed, tc.fails, err, out)
			}
			if tc.fails && !strings.Contains(out, "Input/output error") {
				t.Errorf("qemu-io %q on a failing disk says no EIO:\n%s", tc.op, out)
			}
			if least := max(tc.least, o.SlowDisk); !tc.fails && took < least {
				t.Errorf("qemu-io %q took %v, under %v", tc.op, took, least)
			}
			if tc.most > 0 && took > tc.most {
				t.Errorf("qemu-io %q took %v, over %v: the disk is still throttled", tc.op, took, tc.most)
			}
		})
	}
}
