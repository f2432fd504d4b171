package storage

import (
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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

// TestMountReplayed follows mountReplayed's choices: what it does to the
// volume, in order, for each state and outcome of its steps.
func TestMountReplayed(t *testing.T) {
	failed := errors.New("failed")
	for _, tc := range []struct {
		name    string
		state   fsState
		mount   []error // each mount's result, in turn
		errored bool
		unmount error
		check   error
		want    string // the steps taken
		again   bool
		err     bool
	}{
		{name: "clean", state: fsClean, want: "mount"},
		{name: "checked", state: fsCheck, want: "mount"},
		{name: "clean, mount fails", state: fsClean, mount: []error{failed}, want: "mount", err: true},
		{name: "replayed", state: fsReplay, want: "mount errored"},
		{name: "replayed with an error", state: fsReplay, errored: true, want: "mount errored unmount check mount", again: true},
		{name: "replay fails", state: fsReplay, mount: []error{failed}, want: "mount check mount", again: true},
		{name: "replay and the second mount fail", state: fsReplay, mount: []error{failed, failed}, want: "mount check mount", again: true, err: true},
		{name: "e2fsck fails", state: fsReplay, mount: []error{failed}, check: failed, want: "mount check", again: true, err: true},
		{name: "unmount fails", state: fsReplay, errored: true, unmount: failed, want: "mount errored unmount", err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var steps []string
			mounts := tc.mount
			v := volume{
				mount: func() error {
					steps = append(steps, "mount")
					if len(mounts) == 0 {
						return nil
					}
					err := mounts[0]
					mounts = mounts[1:]
					return err
				},
				unmount: func() error { steps = append(steps, "unmount"); return tc.unmount },
				errored: func() bool { steps = append(steps, "errored"); return tc.errored },
				check:   func() error { steps = append(steps, "check"); return tc.check },
			}
			again, err := v.mountReplayed(slog.New(slog.DiscardHandler), tc.state)
			if got := strings.Join(steps, " "); got != tc.want {
				t.Errorf("steps %q, want %q", got, tc.want)
			}
			if again != tc.again || (err != nil) != tc.err {
				t.Errorf("mountReplayed = %v, %v; want again %v, an error %v", again, err, tc.again, tc.err)
			}
		})
	}
}
