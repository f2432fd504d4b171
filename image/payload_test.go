package image

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/u-root/mkuimage/cpio"

	"github.com/borough-os/borough/internal/verity"
)

// TestNodePayload builds a payload twice from the same files: the same
// bytes, a tree its descriptor checks, and a squashfs that holds the files
// with their modes, without the device nodes.
func TestNodePayload(t *testing.T) {
	records := func() []cpio.Record {
		return []cpio.Record{
			cpio.Directory("bin", 0o755),
			cpio.StaticFile("bin/node", string(bytes.Repeat([]byte("node"), 100_000)), 0o755),
			cpio.Directory("etc", 0o755),
			cpio.StaticFile("etc/mke2fs.conf", "[defaults]\n", 0o644),
			cpio.Directory("dev", 0o755),
			cpio.CharDev("dev/console", 0o600, 5, 1),
			cpio.Symlink("lib64", "/lib/nowhere"),
		}
	}
	epoch := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	img, d, err := NodePayload(records(), epoch)
	if err != nil {
		t.Fatal(err)
	}
	again, _, err := NodePayload(records(), epoch)
	if err != nil || !bytes.Equal(img, again) {
		t.Fatalf("two builds of one payload differ (%v)", err)
	}
	data := img[:d.DataBlocks*verity.BlockSize]
	if rebuilt, d2 := verity.Build(data); d2.String() != d.String() || !bytes.Equal(rebuilt, img) {
		t.Error("the payload's tree or descriptor is not its data's")
	}

	path := filepath.Join(t.TempDir(), "payload")
	if err := os.WriteFile(path, img, 0o600); err != nil {
		t.Fatal(err)
	}
	list, err := exec.Command("unsquashfs", "-lls", "-d", "", path).CombinedOutput()
	if err != nil {
		t.Fatalf("unsquashfs -lls: %v\n%s", err, list)
	}
	for _, want := range []string{
		"-rwxr-xr-x root/root 400000 2026-03-01 00:00 /bin/node",
		"-rw-r--r-- root/root 11 2026-03-01 00:00 /etc/mke2fs.conf",
		"lrwxrwxrwx root/root 12 2026-03-01 00:00 /lib64 -> /lib/nowhere",
		"drwxr-xr-x root/root",
	} {
		if !strings.Contains(strings.Join(strings.Fields(string(list)), " "), want) {
			t.Errorf("the payload lacks %q:\n%s", want, list)
		}
	}
	if strings.Contains(string(list), "console") {
		t.Errorf("the payload holds a device node:\n%s", list)
	}
}
