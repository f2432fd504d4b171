// Package atomicfile replaces files so that, after a crash at any point,
// a file holds either its old or its new contents: never a mix, never
// nothing.
//
// The steps: write a temporary file beside each target (removing one a
// crash left, which would keep its old mode), sync the filesystem, rename
// each temporary over its target, then sync the filesystem again. Most
// filesystems make do with an fsync of the directory after the rename;
// vfat (the ESP) does not: its rename writes the new directory entry from
// the file's in-memory inode only when that inode is written back, so a
// directory fsync can leave an entry with no size and no clusters.
// Borough's crash tests saw exactly that (an empty key file after power
// loss).
//
// WriteAll replaces several files with those two syncs in all, where a
// Write of each would take two syncs apiece: a node's first boot writes a
// dozen files, and each sync on an encrypted volume is dear
// (docs/decisions.md, "Syncs on a first boot"). Each file is still replaced atomically; a crash between two
// renames leaves some files new and the others old, as the same Writes one
// after the other would.
//
// Remove is the same care for a file that must stay gone, and Erase for a
// key that must also leave the disk: unlinking on FAT only marks the
// directory entry deleted and frees the clusters, which keep the bytes
// for anyone who reads the raw disk.
//
// After syncfs, each sync also fsyncs the directory: vfat has no sync_fs,
// so its syncfs writes the dirty blocks but never asks the disk to flush
// its write cache, where fsync does. ext4 (the data volume) is spared
// that fsync: its sync_fs already commits the journal with a cache flush,
// and a second flush per sync is only time.
package atomicfile

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// A File is what WriteAll writes to one path; a new file gets mode Perm.
type File struct {
	Path string
	Data []byte
	Perm os.FileMode
}

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
	return WriteAll(File{Path: path, Data: data, Perm: perm})
}

// WriteAll replaces each file as Write does, with one sync of each
// filesystem they are on before the renames and one after.
func WriteAll(files ...File) (err error) {
	var temps []string
	defer func() {
		if err != nil {
			for _, t := range temps {
				os.Remove(t)
			}
		}
	}()
	for _, f := range files {
		tmp := f.Path + ".tmp"
		if err := writeTemp(tmp, f.Data, f.Perm); err != nil {
			return err
		}
		temps = append(temps, tmp)
	}
	if err := syncAll(files); err != nil {
		return err
	}
	for i, f := range files {
		if err := os.Rename(temps[i], f.Path); err != nil {
			return err
		}
	}
	return syncAll(files)
}

// Remove removes path, durably: on vfat an unlink stays in memory until
// writeback, some 30 s later, and a power cut before it brings the file
// back. Removing a file that does not exist, in a directory that does, is
// not an error.
func Remove(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return syncfs(filepath.Dir(path))
}

// Rename renames oldpath, a file or a directory tree written in full, to
// newpath once everything under it is on the disk, and syncs again after:
// after a crash newpath is there whole, or not at all.
func Rename(oldpath, newpath string) error {
	if err := syncfs(filepath.Dir(oldpath)); err != nil {
		return err
	}
	if err := os.Rename(oldpath, newpath); err != nil {
		return err
	}
	return syncfs(filepath.Dir(newpath))
}

// RemoveAll removes path and everything under it, durably, as Remove
// does a file.
func RemoveAll(path string) error {
	if err := os.RemoveAll(path); err != nil {
		return err
	}
	return syncfs(filepath.Dir(path))
}

// Erase overwrites path with zeros where it lies on the disk, syncs, and
// then Removes it: for a key, which an undeleted directory entry would
// otherwise give back. FAT and ext4 (without data journalling) write over
// a file's own blocks; a flash disk's controller may still keep old
// copies out of reach of the filesystem. Erasing a file that does not
// exist is not an error.
func Erase(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if errors.Is(err, os.ErrNotExist) {
		return syncfs(filepath.Dir(path))
	}
	if err != nil {
		return err
	}
	err = overwrite(f)
	if err := errors.Join(err, f.Close()); err != nil {
		return err
	}
	return Remove(path)
}

// overwrite writes zeros over all of f and syncs it.
func overwrite(f *os.File) error {
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if _, err := f.WriteAt(make([]byte, st.Size()), 0); err != nil {
		return err
	}
	return f.Sync()
}

// writeTemp writes data to a new file at path, in a directory it makes
// if needed, replacing what a crash left there.
func writeTemp(path string, data []byte, perm os.FileMode) (err error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, f.Close()) }()
	_, err = f.Write(data)
	return err
}

// syncAll syncs each filesystem that holds one of files' directories,
// once.
func syncAll(files []File) error {
	synced := map[uint64]bool{}
	for _, f := range files {
		dir := filepath.Dir(f.Path)
		var st unix.Stat_t
		if err := unix.Stat(dir, &st); err != nil {
			return &os.PathError{Op: "stat", Path: dir, Err: err}
		}
		if synced[st.Dev] {
			continue
		}
		if err := syncfs(dir); err != nil {
			return err
		}
		synced[st.Dev] = true
	}
	return nil
}

func syncfs(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := unix.Syncfs(int(d.Fd())); err != nil {
		return fmt.Errorf("syncing the filesystem of %s: %w", dir, err)
	}
	var fs unix.Statfs_t
	if err := unix.Fstatfs(int(d.Fd()), &fs); err == nil && fs.Type == unix.EXT4_SUPER_MAGIC {
		return nil
	}
	if err := d.Sync(); err != nil {
		return fmt.Errorf("flushing the disk cache under %s: %w", dir, err)
	}
	return nil
}
