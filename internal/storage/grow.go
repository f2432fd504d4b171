package storage

import (
	"fmt"
	"strings"

	diskfs "github.com/diskfs/go-diskfs"
	"github.com/diskfs/go-diskfs/partition/gpt"
	"github.com/google/uuid"

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
// grow. Nothing on the disk may be in use.
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
	disk, err := diskfs.Open(d.Path)
	if err != nil {
		return 0, fmt.Errorf("opening %s to renew its partition table: %w", d.Path, err)
	}
	defer disk.Close()
	if err := disk.Partition(table); err != nil {
		return 0, fmt.Errorf("renewing the partition table of %s: %w", d.Path, err)
	}
	grown := end - data.End
	d.Table = table
	if grown == 0 {
		return 0, nil
	}
	return int64(end-data.Start+1) * sectorSize, nil
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
