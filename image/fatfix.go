package image

import (
	"encoding/binary"
	"fmt"
	"os"
)

// fixDotDot works around a go-diskfs v1.9.4 bug: a directory created in
// the root of a FAT32 volume gets a ".." entry pointing at the root's
// cluster, where the FAT specification (and fsck.fat) wants cluster 0.
// Firmware ignores it, but fsck.fat reports the volume as damaged and
// would "fix" it. This rewrites the ".." entry of every subdirectory of
// the root, on the FAT32 volume at byte offset off of the image at path.
func fixDotDot(path string, off int64) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	v, err := readVolume(f, off)
	if err != nil {
		return err
	}
	for c := v.rootCluster; c >= 2 && c < 0x0FFFFFF8; {
		dir := make([]byte, v.clusterSize)
		if _, err := f.ReadAt(dir, v.clusterOffset(c)); err != nil {
			return fmt.Errorf("reading root directory: %w", err)
		}
		for i := 0; i+32 <= len(dir); i += 32 {
			e := dir[i : i+32]
			if e[0] == 0 {
				return nil
			}
			const attrLFN, attrDir = 0x0F, 0x10
			if e[0] == 0xE5 || e[0] == '.' || e[11] == attrLFN || e[11]&attrDir == 0 {
				continue
			}
			sub := uint32(binary.LittleEndian.Uint16(e[20:]))<<16 | uint32(binary.LittleEndian.Uint16(e[26:]))
			// The second entry of the subdirectory is "..": zero its
			// cluster number (high word at 20, low word at 26).
			dotdot := v.clusterOffset(sub) + 32
			if _, err := f.WriteAt(make([]byte, 2), dotdot+20); err != nil {
				return err
			}
			if _, err := f.WriteAt(make([]byte, 2), dotdot+26); err != nil {
				return err
			}
		}
		if c, err = v.next(f, c); err != nil {
			return err
		}
	}
	return nil
}

// fat32 is what fixDotDot needs of a FAT32 boot sector.
type fat32 struct {
	fatOffset, dataOffset int64
	clusterSize           int64
	rootCluster           uint32
}

func readVolume(f *os.File, off int64) (fat32, error) {
	bs := make([]byte, 512)
	if _, err := f.ReadAt(bs, off); err != nil {
		return fat32{}, fmt.Errorf("reading FAT boot sector: %w", err)
	}
	bytesPerSector := int64(binary.LittleEndian.Uint16(bs[11:]))
	reserved := int64(binary.LittleEndian.Uint16(bs[14:]))
	fats := int64(bs[16])
	fatSectors := int64(binary.LittleEndian.Uint32(bs[36:]))
	if bytesPerSector == 0 || bs[13] == 0 || string(bs[82:87]) != "FAT32" {
		return fat32{}, fmt.Errorf("no FAT32 boot sector at offset %d", off)
	}
	return fat32{
		fatOffset:   off + reserved*bytesPerSector,
		dataOffset:  off + (reserved+fats*fatSectors)*bytesPerSector,
		clusterSize: int64(bs[13]) * bytesPerSector,
		rootCluster: binary.LittleEndian.Uint32(bs[44:]),
	}, nil
}

func (v fat32) clusterOffset(c uint32) int64 {
	return v.dataOffset + int64(c-2)*v.clusterSize
}

// next returns the cluster after c in its chain.
func (v fat32) next(f *os.File, c uint32) (uint32, error) {
	b := make([]byte, 4)
	if _, err := f.ReadAt(b, v.fatOffset+int64(c)*4); err != nil {
		return 0, fmt.Errorf("reading FAT: %w", err)
	}
	return binary.LittleEndian.Uint32(b) & 0x0FFFFFFF, nil
}
