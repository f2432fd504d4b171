package image

import (
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"path"
	"slices"
	"strings"

	diskfs "github.com/diskfs/go-diskfs"
	"github.com/diskfs/go-diskfs/partition/gpt"

	"github.com/borough-os/borough/esp"
	"github.com/borough-os/borough/internal/partition"
)

// ReadESPFile reads f from the ESP of the disk or image at disk, without
// mounting it.
func ReadESPFile(disk string, f esp.File) ([]byte, error) {
	d, err := diskfs.Open(disk, diskfs.WithOpenMode(diskfs.ReadOnly))
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", disk, err)
	}
	defer d.Close()
	espIndex, _, err := FindPartition(disk, partition.ESPType)
	if err != nil {
		return nil, err
	}
	fs, err := d.GetFilesystem(espIndex)
	if err != nil {
		return nil, fmt.Errorf("reading the ESP of %s: %w", disk, err)
	}
	entries, err := fs.ReadDir(path.Dir(string(f)))
	i := -1
	if err == nil {
		if i = slices.IndexFunc(entries, func(e iofs.DirEntry) bool { return e.Name() == path.Base(string(f)) }); i < 0 {
			err = iofs.ErrNotExist
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%s is not on the ESP: %w", f, err)
	}
	info, err := entries[i].Info()
	if err != nil {
		return nil, fmt.Errorf("reading %s from the ESP: %w", f, err)
	}
	file, err := fs.OpenFile("/"+string(f), os.O_RDONLY)
	if err != nil {
		return nil, fmt.Errorf("reading %s from the ESP: %w", f, err)
	}
	// One read of the file's size: go-diskfs's FAT32 reader, past a
	// first read that ends inside a cluster, returns the rest of that
	// cluster, beyond the file's end (io.ReadAll read a 560-byte owner
	// recovery record back as 768 bytes, which JSON refused).
	b := make([]byte, info.Size())
	if _, err := io.ReadFull(file, b); err != nil {
		return nil, fmt.Errorf("reading %s from the ESP: %w", f, err)
	}
	return b, nil
}

// FindPartition returns the number and entry of the partition of type typ
// on the GPT disk or image at path.
func FindPartition(path, typ string) (int, *gpt.Partition, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, nil, err
	}
	defer f.Close()
	table, err := gpt.Read(f, 512, 512)
	var pathErr *iofs.PathError
	switch {
	case errors.As(err, &pathErr):
		return 0, nil, fmt.Errorf("reading %s: %w", path, err)
	case err != nil:
		// go-diskfs says which bytes it found instead of a signature:
		// nothing a user can act on.
		return 0, nil, fmt.Errorf("%s is not a disk image: it has no GPT partition table (a Borough image has one, as has a disk one was written to)", path)
	}
	for _, p := range table.Partitions {
		if strings.EqualFold(string(p.Type), typ) {
			return p.Index, p, nil
		}
	}
	return 0, nil, fmt.Errorf("%s has no partition of type %s", path, typ)
}

// WriteESPFile writes b as f into the ESP of a disk image (or disk),
// without mounting it.
func WriteESPFile(disk string, f esp.File, b []byte) error {
	index, _, err := FindPartition(disk, partition.ESPType)
	if err != nil {
		return err
	}
	d, err := diskfs.Open(disk, diskfs.WithOpenMode(diskfs.ReadWrite))
	if err != nil {
		return fmt.Errorf("opening %s: %w", disk, err)
	}
	defer d.Close()
	fs, err := d.GetFilesystem(index)
	if err != nil {
		return fmt.Errorf("reading the ESP of %s: %w", disk, err)
	}
	file, err := fs.OpenFile("/"+string(f), os.O_CREATE|os.O_RDWR|os.O_TRUNC)
	if err != nil {
		return fmt.Errorf("creating %s on the ESP: %w", f, err)
	}
	if _, err := file.Write(b); err != nil {
		file.Close()
		return fmt.Errorf("writing %s on the ESP: %w", f, err)
	}
	return file.Close()
}
