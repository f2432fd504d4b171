// Package atomicfile replaces files so that, after a crash at any point,
// a file holds either its old or its new contents: never a mix, never
// nothing.
//
// The steps: write a temporary file beside the target (removing one a
// crash left, which would keep its old mode), fsync it, rename it over the
// target, then sync the whole filesystem. Most filesystems make do with an
// fsync of the directory after the rename; vfat (the ESP) does not: its
// rename writes the new directory entry from the file's in-memory inode
// only when that inode is written back, so a directory fsync can leave an
// entry with no size and no clusters. Borough's crash tests saw exactly
// that (an empty key file after power loss).
package atomicfile

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Update is Write, unless path already holds data: a file rewritten only
// when it changes is not put at risk by a power cut on every boot.
func Update(path string, data []byte, perm os.FileMode) error {
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		return nil
	}
	return Write(path, data, perm)
}

// Write replaces path with data, durably, creating path's directory
// (mode 0700) if needed. A new file gets mode perm. Errors name the file
// operation and path that failed; callers add what the file is.
func Write(path string, data []byte, perm os.FileMode) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := writeSynced(tmp, data, perm); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := unix.Syncfs(int(d.Fd())); err != nil {
		return fmt.Errorf("syncing the filesystem: %w", err)
	}
	return nil
}

func writeSynced(path string, data []byte, perm os.FileMode) (err error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, f.Close()) }()
	if _, err := f.Write(data); err != nil {
		return err
	}
	return f.Sync()
}
