package storage

import (
	"fmt"

	diskfs "github.com/diskfs/go-diskfs"
	"github.com/diskfs/go-diskfs/partition/gpt"

	"github.com/borough-os/borough/internal/bootdisk"
)

const (
	sectorSize = 512
	alignment  = 1 << 20
	// gptTail is the backup GPT: 32 sectors of entries and the header.
	gptTail = 33 * sectorSize
)

// grow makes the data partition fill the disk when the image was written
// to a larger disk: it rewrites the GPT for the disk's real size, which
// moves the backup header to the end, with the data partition (which must
// be the last one) ending at the last whole MiB, and has the kernel re-read
// the table. It returns the data partition's new size in bytes, or 0 if
// there was nothing to grow. Nothing on the disk may be in use.
func grow(d *bootdisk.Disk) (int64, error) {
	var data *gpt.Partition
	for _, p := range d.Table.Partitions {
		if p.Index == d.DataIndex {
			data = p
		}
	}
	if data == nil {
		return 0, fmt.Errorf("no partition %d on %s", d.DataIndex, d.Path)
	}
	for _, p := range d.Table.Partitions {
		if p.Start > data.Start {
			return 0, nil // not the last partition; leave the layout alone
		}
	}
	end := uint64((d.Size-gptTail)/alignment*alignment/sectorSize) - 1
	if end <= data.End {
		return 0, nil
	}
	table := &gpt.Table{
		LogicalSectorSize:  sectorSize,
		PhysicalSectorSize: sectorSize,
		ProtectiveMBR:      true,
		GUID:               d.Table.GUID,
	}
	for _, p := range d.Table.Partitions {
		c := *p
		if c.Index == data.Index {
			c.End = end
			c.Size = (end - c.Start + 1) * sectorSize
		}
		table.Partitions = append(table.Partitions, &c)
	}
	disk, err := diskfs.Open(d.Path)
	if err != nil {
		return 0, fmt.Errorf("opening %s to grow it: %w", d.Path, err)
	}
	defer disk.Close()
	if err := disk.Partition(table); err != nil {
		return 0, fmt.Errorf("growing data partition on %s: %w", d.Path, err)
	}
	d.Table = table
	return int64(end-data.Start+1) * sectorSize, nil
}
