package storage

import (
	"encoding/binary"
	"hash/crc32"
	"io"
	"os"
)

// The ext4 superblock fields superblockState reads (offsets from the
// superblock's start, 1024 bytes into the volume; Linux's struct
// ext4_super_block).
const (
	superblockOffset = 1024
	superblockSize   = 1024

	sbMagic         = 0x38
	sbState         = 0x3a
	sbIncompat      = 0x60
	sbROCompat      = 0x64
	sbLastOrphan    = 0xe8
	sbChecksum      = 0x3fc
	ext4Magic       = 0xef53
	stateValid      = 0x1   // unmounted cleanly, or mounted with a journal
	stateError      = 0x2   // the kernel found an error
	stateOrphans    = 0x4   // orphans were being recovered
	incompatRecover = 0x4   // the journal needs replaying
	roMetadataCsum  = 0x400 // metadata checksums, the superblock's among them
	errorCountAt    = 0x194 // s_error_count
)

// fsState is what a volume's ext4 superblock says it needs before it is
// mounted.
type fsState int

const (
	// fsClean: unmounted cleanly, no error recorded: `e2fsck -p` would
	// only print "clean" (mke2fs.conf turns off periodic checks).
	fsClean fsState = iota
	// fsReplay: clean but for what a power cut leaves, a journal to
	// replay and orphans (files deleted while open) to free, which the
	// kernel does as it mounts, as `e2fsck -p` would before it.
	fsReplay
	// fsCheck: anything else, a superblock that does not read or whose
	// checksum fails among it: e2fsck checks, and says what is wrong.
	fsCheck
)

func (s fsState) String() string { return [...]string{"clean", "replay", "check"}[s] }

// superblockState reads what the ext4 filesystem on dev needs from its
// superblock. Under TCG, e2fsck costs a restart about 0.2 s when it only
// says "clean", almost all of it starting e2fsck from the payload, and
// 0.26 to 0.42 s of a cold restart's nodes when it replays a journal
// (docs/decisions.md, "The journal's replay after a power cut"). This
// reads the superblock itself: go-diskfs's ext4 package parses it but
// exports none of these fields, reads the group descriptors too, and
// would cost every boot its package inits.
func superblockState(dev string) fsState {
	sb, err := readSuperblock(dev)
	if err != nil {
		return fsCheck
	}
	return stateOf(sb)
}

// recordsError says whether the filesystem on dev, mounted, has recorded
// an error since: the kernel's replay of a journal that logged one sets
// it as it mounts. The superblock is the kernel's then, changed in place,
// so its checksum is not held against it.
func recordsError(dev string) bool {
	sb, err := readSuperblock(dev)
	return err != nil || !isExt4(sb) || hasError(sb)
}

func readSuperblock(dev string) ([]byte, error) {
	f, err := os.Open(dev)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sb := make([]byte, superblockSize)
	if _, err := f.ReadAt(sb, superblockOffset); err != nil && err != io.EOF {
		return nil, err
	}
	return sb, nil
}

// stateOf is superblockState's reading of a superblock's bytes.
func stateOf(sb []byte) fsState {
	le := binary.LittleEndian
	switch {
	case !validSuperblock(sb) || hasError(sb) || le.Uint16(sb[sbState:])&stateValid == 0:
		return fsCheck
	case le.Uint32(sb[sbIncompat:])&incompatRecover != 0 || le.Uint32(sb[sbLastOrphan:]) != 0:
		return fsReplay
	}
	return fsClean
}

// validSuperblock says whether sb is an ext4 superblock whose checksum,
// if it has one, holds.
func validSuperblock(sb []byte) bool {
	le := binary.LittleEndian
	if !isExt4(sb) {
		return false
	}
	if le.Uint32(sb[sbROCompat:])&roMetadataCsum == 0 {
		return true
	}
	// Linux's crc32c seeded with ~0, not inverted at the end: Go's
	// Checksum, which inverts at both ends, inverted.
	sum := ^crc32.Checksum(sb[:sbChecksum], crc32.MakeTable(crc32.Castagnoli))
	return sum == le.Uint32(sb[sbChecksum:])
}

// isExt4 says whether sb is an ext4 superblock.
func isExt4(sb []byte) bool {
	return len(sb) >= superblockSize && binary.LittleEndian.Uint16(sb[sbMagic:]) == ext4Magic
}

// hasError says whether sb records an error or an orphan recovery cut
// short.
func hasError(sb []byte) bool {
	le := binary.LittleEndian
	return le.Uint16(sb[sbState:])&(stateError|stateOrphans) != 0 || le.Uint32(sb[errorCountAt:]) != 0
}
