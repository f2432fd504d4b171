package storage

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestClean makes real ext4 filesystems with the node's mke2fs arguments
// and puts them, with debugfs, in each state that e2fsck must see.
func TestClean(t *testing.T) {
	for _, tc := range []struct {
		name    string
		debugfs string // a debugfs -w request, if any
		damage  bool   // change a superblock byte without its checksum
		want    bool
	}{
		{name: "new", want: true},
		{name: "not unmounted cleanly", debugfs: "ssv state 0"},
		{name: "errors recorded in the state", debugfs: "ssv state 3"},
		{name: "orphans in recovery", debugfs: "ssv state 5"},
		{name: "an error count", debugfs: "ssv error_count 1"},
		{name: "a journal to replay", debugfs: "feature needs_recovery"},
		{name: "orphans to delete", debugfs: "ssv last_orphan 12"},
		{name: "a damaged superblock", damage: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			img := newExt4(t)
			if tc.debugfs != "" {
				runTool(t, "debugfs", "-w", "-R", tc.debugfs, img)
			}
			if tc.damage {
				f, err := os.OpenFile(img, os.O_RDWR, 0)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := f.WriteAt([]byte("x"), superblockOffset+0x78); err != nil { // the volume name
					t.Fatal(err)
				}
				f.Close()
			}
			if got := clean(img); got != tc.want {
				t.Errorf("clean = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestCleanNotExt4(t *testing.T) {
	dir := t.TempDir()
	zeros := filepath.Join(dir, "zeros")
	if err := os.WriteFile(zeros, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, dev := range []string{zeros, filepath.Join(dir, "missing")} {
		if clean(dev) {
			t.Errorf("clean(%s) = true", dev)
		}
	}
}

// newExt4 makes a 16 MiB ext4 image as a first boot does.
func newExt4(t *testing.T) string {
	t.Helper()
	img := filepath.Join(t.TempDir(), "ext4.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 16<<20); err != nil {
		t.Fatal(err)
	}
	runTool(t, "mke2fs", MkfsArgs(img)...)
	return img
}

func runTool(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
}
