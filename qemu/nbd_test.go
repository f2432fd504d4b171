package qemu

import (
	"bytes"
	"context"
	"errors"
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

// TestDiskFaults reads and writes a disk served with nbdkit's error and
// delay filters: it works, fails with EIO while its fail file is there,
// works again once it is gone, and every request that works waits the
// delay (a failing one fails first).
func TestDiskFaults(t *testing.T) {
	dir := t.TempDir()
	image := filepath.Join(dir, "disk.img")
	if err := os.WriteFile(image, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	o := Options{StateDir: dir, DiskFaults: true, SlowDisk: 200 * time.Millisecond}
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
	for _, tc := range []struct {
		name    string
		failing bool
		op      string
		fails   bool
	}{
		{"a read", false, "read 0 64k", false},
		{"a write", false, "write -P 0xab 0 64k", false},
		{"a read of a failing disk", true, "read 0 64k", true},
		{"a write to a failing disk", true, "write -P 0xcd 0 64k", true},
		{"a read once it works again", false, "read -P 0xab 0 64k", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.failing {
				if err := os.WriteFile(o.diskFailFile(), nil, 0o600); err != nil {
					t.Fatal(err)
				}
			} else if err := os.Remove(o.diskFailFile()); err != nil && !errors.Is(err, os.ErrNotExist) {
				t.Fatal(err)
			}
			out, took, err := io(tc.op)
			failed := err != nil || strings.Contains(out, "Input/output error") || strings.Contains(out, "Pattern verification failed")
			if failed != tc.fails {
				t.Errorf("qemu-io %q (apt-get install qemu-utils nbdkit): failed %v, want %v: %v\n%s", tc.op, failed, tc.fails, err, out)
			}
			if tc.fails && !strings.Contains(out, "Input/output error") {
				t.Errorf("qemu-io %q on a failing disk says no EIO:\n%s", tc.op, out)
			}
			if !tc.fails && took < o.SlowDisk {
				t.Errorf("qemu-io %q took %v, under the disk's delay of %v", tc.op, took, o.SlowDisk)
			}
		})
	}
}
