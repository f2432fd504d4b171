package qemu

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
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
			d, err := startVolatileDisk(context.Background(), image, dir, 0)
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
