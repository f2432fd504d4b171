package storage

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/borough-os/borough/esp"
)

// ESPRoot is where the node mounts the ESP.
const ESPRoot = "/esp"

// mountESP mounts the ESP vfat, without devices, set-uid or executables.
func mountESP(dev string) error {
	if err := os.MkdirAll(ESPRoot, 0o700); err != nil {
		return err
	}
	err := unix.Mount(dev, ESPRoot, "vfat", unix.MS_NODEV|unix.MS_NOSUID|unix.MS_NOEXEC, "umask=0077,shortname=mixed")
	if err != nil {
		return &os.PathError{Op: "mount vfat " + dev, Path: ESPRoot, Err: err}
	}
	return nil
}

// readESP reads f from the ESP mounted at root; a missing file is
// os.ErrNotExist.
func readESP(root string, f esp.File) ([]byte, error) {
	return os.ReadFile(f.In(root))
}

// writeESP writes f on the ESP mounted at root atomically and durably: a temporary
// file, fsync, rename over f, then a sync of the whole filesystem. After a
// crash, f holds either the old or the new contents.
//
// vfat needs the filesystem-wide sync where other filesystems make do with
// an fsync of the directory: its rename writes the new directory entry
// from the file's in-memory inode only when that inode is written back, so
// a directory fsync alone can leave an entry with no size and no clusters
// (seen in the crash tests: an empty key file after power loss).
func writeESP(root string, f esp.File, data []byte) error {
	path := f.In(root)
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("writing %s: %w", f, err)
	}
	tmp := path + ".tmp"
	// A temporary file left by a crash would keep its old mode.
	if err := os.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("writing %s: %w", f, err)
	}
	if err := writeSynced(tmp, data); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("writing %s: %w", f, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("writing %s: %w", f, err)
	}
	return syncFS(dir)
}

func writeSynced(path string, data []byte) (err error) {
	w, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, w.Close()) }()
	if _, err := w.Write(data); err != nil {
		return err
	}
	return w.Sync()
}

// syncFS writes everything cached for the filesystem holding dir.
func syncFS(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := unix.Syncfs(int(d.Fd())); err != nil {
		return fmt.Errorf("syncing the filesystem of %s: %w", dir, err)
	}
	return nil
}
