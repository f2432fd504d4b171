package storage

import (
	"fmt"
	"os"
	"strings"
	"unsafe"

	"github.com/diskfs/go-diskfs/backend/file"
	"github.com/diskfs/go-diskfs/partition/gpt"
	"github.com/google/uuid"
	"golang.org/x/sys/unix"

	"github.com/borough-os/borough/internal/bootdisk"
)

const (
	sectorSize = 512
	alignment  = 1 << 20
	// gptTail is the backup GPT: 32 sectors of entries and the header.
	gptTail = 33 * sectorSize
)

// renewTable rewrites the boot disk's GPT on a first boot, and has the
// kernel re-read it:
//
//   - with new random disk and partition GUIDs: the image's are derived
//     from its contents, so that a build is reproducible, and every disk
//     written from one image shares them until its first boot;
//   - with the data partition grown to fill the disk, when the image was
//     written to a larger one (the backup header moves to the end; the
//     data partition, which must be the last, ends at the last whole MiB).
//
// It returns the data partition's new size in bytes, or 0 if it did not
// grow. The data partition must not be in use; the kernel learns only of
// its new size (the GUIDs matter from the next boot on).
func renewTable(d *bootdisk.Disk) (int64, error) {
	var data *gpt.Partition
	for _, p := range d.Table.Partitions {
		if p.Index == d.DataIndex {
			data = p
		}
	}
	if data == nil {
		return 0, fmt.Errorf("no partition %d on %s", d.DataIndex, d.Path)
	}
	end := data.End
	if last := uint64((d.Size-gptTail)/alignment*alignment/sectorSize) - 1; last > end && isLast(d.Table, data) {
		end = last
	}
	table := &gpt.Table{
		LogicalSectorSize:  sectorSize,
		PhysicalSectorSize: sectorSize,
		ProtectiveMBR:      true,
		GUID:               strings.ToUpper(uuid.NewString()),
	}
	for _, p := range d.Table.Partitions {
		c := *p
		c.GUID = strings.ToUpper(uuid.NewString())
		if c.Index == data.Index {
			c.End = end
			c.Size = (end - c.Start + 1) * sectorSize
		}
		table.Partitions = append(table.Partitions, &c)
	}
	// Not exclusively: the ESP is mounted, as init runs the node from it.
	// The raw backend, not diskfs.Open: that links go-diskfs's every
	// filesystem into the node, whose package inits cost each boot.
	disk, err := file.OpenFromPathWithExclusive(d.Path, false, false)
	if err != nil {
		return 0, fmt.Errorf("opening %s to renew its partition table: %w", d.Path, err)
	}
	defer disk.Close()
	rw, err := disk.Writable()
	if err != nil {
		return 0, fmt.Errorf("opening %s to renew its partition table: %w", d.Path, err)
	}
	if err := table.Write(rw, d.Size); err != nil {
		return 0, fmt.Errorf("renewing the partition table of %s: %w", d.Path, err)
	}
	d.Table = table
	if end == data.End {
		return 0, nil
	}
	size := int64(end-data.Start+1) * sectorSize
	if err := resizePartition(d.Path, data.Index, int64(data.Start)*sectorSize, size); err != nil {
		return 0, fmt.Errorf("telling the kernel that partition %d of %s grew: %w", data.Index, d.Path, err)
	}
	return size, nil
}

// blkpg is BLKPG, _IO(0x12, 105), which x/sys/unix does not define.
const blkpg = 0x1269

// resizePartition tells the kernel partition pno of the disk at path now
// spans length bytes from start. Unlike re-reading the whole table, it
// works while other partitions are in use: init runs the node from the
// ESP.
func resizePartition(path string, pno int, start, length int64) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	part := unix.BlkpgPartition{Start: start, Length: length, Pno: int32(pno)}
	arg := unix.BlkpgIoctlArg{Op: unix.BLKPG_RESIZE_PARTITION, Datalen: int32(unsafe.Sizeof(part)),
		Data: (*byte)(unsafe.Pointer(&part))}
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), blkpg, uintptr(unsafe.Pointer(&arg)))
	if errno != 0 {
		return errno
	}
	return nil
}

// isLast says whether p is the last partition on the disk.
func isLast(t *gpt.Table, p *gpt.Partition) bool {
	for _, q := range t.Partitions {
		if q.Start > p.Start {
			return false
		}
	}
	return true
}
