// Package image writes Borough's disk image: a GPT disk with a protective
// MBR, an EFI system partition (FAT32) holding the boot binary at the
// removable-media path and the node payload, and an empty data partition
// that the node encrypts and formats on first boot.
//
// Build is a plan (Plan: pure arithmetic over the parameters) followed by
// its application with go-diskfs. The same inputs give a byte-identical
// image: disk and partition GUIDs are derived from the boot binary, the
// node payload and the size, and FAT timestamps and serials come from Params.Epoch. The image
// is sparse: only the GPT and the ESP's used clusters take disk space.
package image

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	diskfs "github.com/diskfs/go-diskfs"
	"github.com/diskfs/go-diskfs/disk"
	"github.com/diskfs/go-diskfs/filesystem"
	"github.com/diskfs/go-diskfs/partition/gpt"
	"github.com/google/uuid"

	"github.com/borough-os/borough/esp"
	"github.com/borough-os/borough/internal/partition"
)

const (
	sectorSize = 512
	// alignment of partitions: 1 MiB, which suits every disk's erase
	// blocks and 4K-sector disks.
	alignment = 1 << 20
	// gptTail is what the backup GPT takes at the end of the disk: 32
	// sectors of partition entries and the header.
	gptTail = 33 * sectorSize
	// MinDataSize is the smallest data partition Build accepts: etcd
	// alone preallocates 128 MB of write-ahead log.
	MinDataSize = 256 << 20
	// DefaultSize is the image size when none is given.
	DefaultSize = 1 << 30
)

// MinSize is the smallest image Build accepts.
const MinSize = alignment + esp.Size + MinDataSize + alignment

// DefaultEpoch stamps the ESP's files when no SOURCE_DATE_EPOCH is given.
var DefaultEpoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// namespace is the UUIDv5 namespace of Borough's derived GUIDs.
var namespace = uuid.MustParse("5b0b0b1e-6a1c-4d0e-9b3e-8f1f0c2a7d41")

// Params describes an image.
type Params struct {
	// BootBinary is the UKI, written to esp.BootBinary.
	BootBinary []byte
	// NodePayload, if set, is written to esp.NodePayload of its hash;
	// the boot binary's init unpacks it and runs the node.
	NodePayload []byte
	// SecureBootUpdates, if set, are the owner's signed Secure Boot key
	// updates by key name (db, KEK, PK), written to
	// esp.SecureBootUpdate for the node to enrol in setup mode.
	SecureBootUpdates map[string][]byte
	// Size is the image's size in bytes: a multiple of 1 MiB, at least
	// MinSize.
	Size int64
	// Epoch is the time stamped on the ESP's files and volume.
	Epoch time.Time
}

// Plan is the partition layout of an image, in 512-byte sectors
// (inclusive ranges), with its GUIDs.
type Plan struct {
	DiskGUID, ESPGUID, DataGUID string
	ESPStart, ESPEnd            uint64
	DataStart, DataEnd          uint64
}

// NewPlan lays out an image of p.Size bytes.
func NewPlan(p Params) (Plan, error) {
	if p.Size < MinSize {
		return Plan{}, fmt.Errorf("image size %d bytes is below the minimum of %d MiB", p.Size, MinSize>>20)
	}
	if p.Size%alignment != 0 {
		return Plan{}, fmt.Errorf("image size %d bytes is not a multiple of 1 MiB", p.Size)
	}
	if len(p.BootBinary) == 0 {
		return Plan{}, errors.New("boot binary is empty")
	}
	if n := len(p.BootBinary) + len(p.NodePayload); n > esp.Size/2 {
		return Plan{}, fmt.Errorf("boot binary and node payload take %d MiB; the ESP must hold two of each, so at most %d MiB",
			n>>20, esp.Size>>21)
	}
	h := sha256.New()
	h.Write(p.BootBinary)
	h.Write(p.NodePayload)
	h.Write([]byte(strconv.FormatInt(p.Size, 10)))
	seed := h.Sum(nil)
	guid := func(role string) string {
		return uuid.NewSHA1(namespace, append([]byte(role+":"), seed[:]...)).String()
	}
	espStart := uint64(alignment / sectorSize)
	espEnd := espStart + esp.Size/sectorSize - 1
	lastAligned := (p.Size - gptTail) / alignment * alignment
	return Plan{
		DiskGUID:  guid("disk"),
		ESPGUID:   guid("esp"),
		DataGUID:  guid("data"),
		ESPStart:  espStart,
		ESPEnd:    espEnd,
		DataStart: espEnd + 1,
		DataEnd:   uint64(lastAligned/sectorSize) - 1,
	}, nil
}

// Build writes the image to path, replacing any file there only once the
// new image is complete.
func Build(path string, p Params) error {
	plan, err := NewPlan(p)
	if err != nil {
		return err
	}
	if p.Epoch.IsZero() {
		p.Epoch = DefaultEpoch
	}
	// go-diskfs takes a reproducible FAT's time from the environment only.
	if err := os.Setenv("SOURCE_DATE_EPOCH", strconv.FormatInt(p.Epoch.Unix(), 10)); err != nil {
		return err
	}
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	_ = os.Remove(tmp)
	if err := write(tmp, p, plan); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("writing image %s: %w", path, err)
	}
	if err := fixDotDot(tmp, int64(plan.ESPStart)*sectorSize); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("repairing ESP directories of %s: %w", path, err)
	}
	return os.Rename(tmp, path)
}

func write(path string, p Params, plan Plan) error {
	d, err := diskfs.Create(path, p.Size, sectorSize)
	if err != nil {
		return err
	}
	defer d.Close()
	table := &gpt.Table{
		LogicalSectorSize:  sectorSize,
		PhysicalSectorSize: sectorSize,
		ProtectiveMBR:      true,
		GUID:               plan.DiskGUID,
		Partitions: []*gpt.Partition{
			{Index: 1, Start: plan.ESPStart, End: plan.ESPEnd, Type: partition.ESPType, Name: partition.ESPName, GUID: plan.ESPGUID},
			{Index: 2, Start: plan.DataStart, End: plan.DataEnd, Type: partition.DataType, Name: partition.DataName, GUID: plan.DataGUID},
		},
	}
	if err := d.Partition(table); err != nil {
		return fmt.Errorf("writing partition table: %w", err)
	}
	fs, err := d.CreateFilesystem(disk.FilesystemSpec{
		Partition: 1, FSType: filesystem.TypeFat32, VolumeLabel: esp.VolumeLabel, Reproducible: true,
	})
	if err != nil {
		return fmt.Errorf("formatting ESP: %w", err)
	}
	if err := writeESP(fs, p); err != nil {
		return err
	}
	return nil
}

func writeESP(fs filesystem.FileSystem, p Params) error {
	for _, dir := range []string{filepath.Dir(string(esp.BootBinary)), esp.Dir} {
		if err := fs.Mkdir("/" + dir); err != nil {
			return fmt.Errorf("creating ESP directory %s: %w", dir, err)
		}
	}
	if err := writeFile(fs, esp.BootBinary, p.BootBinary); err != nil {
		return err
	}
	if p.NodePayload != nil {
		sum := sha256.Sum256(p.NodePayload)
		if err := writeFile(fs, esp.NodePayload(hex.EncodeToString(sum[:])), p.NodePayload); err != nil {
			return err
		}
	}
	if len(p.SecureBootUpdates) == 0 {
		return nil
	}
	if err := fs.Mkdir("/" + filepath.Dir(string(esp.SecureBootUpdate("db")))); err != nil {
		return fmt.Errorf("creating the ESP's Secure Boot directory: %w", err)
	}
	for _, key := range slices.Sorted(maps.Keys(p.SecureBootUpdates)) {
		if err := writeFile(fs, esp.SecureBootUpdate(key), p.SecureBootUpdates[key]); err != nil {
			return err
		}
	}
	return nil
}

func writeFile(fs filesystem.FileSystem, name esp.File, data []byte) error {
	f, err := fs.OpenFile("/"+string(name), os.O_CREATE|os.O_RDWR)
	if err != nil {
		return fmt.Errorf("creating %s: %w", name, err)
	}
	// One Write: go-diskfs rewrites the FAT on every Write call.
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", name, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", name, err)
	}
	return nil
}
