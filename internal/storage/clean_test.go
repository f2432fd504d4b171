package storage

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestSuperblockState makes real ext4 filesystems with the node's mke2fs
// arguments and puts them, with debugfs, in each state the node must tell
// apart: clean, what the kernel replays as it mounts, and what e2fsck must
// see; recordsError must name those that record an error.
func TestSuperblockState(t *testing.T) {
	for _, tc := range []struct {
		name      string
		debugfs   string // a debugfs -w request, if any
		damage    bool   // change a superblock byte without its checksum
		want      fsState
		withError bool
	}{
		{name: "new", want: fsClean},
		{name: "not unmounted cleanly", debugfs: "ssv state 0", want: fsCheck},
		{name: "errors recorded in the state", debugfs: "ssv state 3", want: fsCheck, withError: true},
		{name: "orphans in recovery", debugfs: "ssv state 5", want: fsCheck, withError: true},
		{name: "an error count", debugfs: "ssv error_count 1", want: fsCheck, withError: true},
		{name: "a journal to replay", debugfs: "feature needs_recovery", want: fsReplay},
		{name: "orphans to delete", debugfs: "ssv last_orphan 12", want: fsReplay},
		{name: "a damaged superblock", damage: true, want: fsCheck},
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
			if got := superblockState(img); got != tc.want {
				t.Errorf("superblockState = %v, want %v", got, tc.want)
			}
			if got := recordsError(img); got != tc.withError {
				t.Errorf("recordsError = %v, want %v", got, tc.withError)
			}
		})
	}
}

func TestSuperblockStateNotExt4(t *testing.T) {
	dir := t.TempDir()
	zeros := filepath.Join(dir, "zeros")
	if err := os.WriteFile(zeros, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, dev := range []string{zeros, filepath.Join(dir, "missing")} {
		if got := superblockState(dev); got != fsCheck {
			t.Errorf("superblockState(%s) = %v, want fsCheck", dev, got)
		}
		if !recordsError(dev) {
			t.Errorf("recordsError(%s) = false", dev)
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
