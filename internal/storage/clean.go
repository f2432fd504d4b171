package storage

import (
	"encoding/binary"
	"hash/crc32"
	"io"
	"os"
)

// The ext4 superblock fields clean reads (offsets from the superblock's
// start, 1024 bytes into the volume; Linux's struct ext4_super_block).
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

// clean says whether the ext4 filesystem on dev was unmounted cleanly and
// records no error, read from its superblock: then `e2fsck -p` would only
// print "clean" (mke2fs.conf turns off periodic checks). Under TCG that
// costs every restart about 0.2 s, almost all of it starting e2fsck from
// the payload. Anything else, a superblock that does not read or whose
// checksum fails among it, is not clean: e2fsck then checks, and says
// what is wrong. This reads the superblock itself: go-diskfs's ext4
// package parses it but exports none of these fields, reads the group
// descriptors too, and would cost every boot its package inits.
func clean(dev string) bool {
	f, err := os.Open(dev)
	if err != nil {
		return false
	}
	defer f.Close()
	sb := make([]byte, superblockSize)
	if _, err := f.ReadAt(sb, superblockOffset); err != nil && err != io.EOF {
		return false
	}
	return cleanSuperblock(sb)
}

// cleanSuperblock is clean's test of a superblock's bytes.
func cleanSuperblock(sb []byte) bool {
	le := binary.LittleEndian
	if len(sb) < superblockSize || le.Uint16(sb[sbMagic:]) != ext4Magic {
		return false
	}
	if le.Uint32(sb[sbROCompat:])&roMetadataCsum != 0 {
		// Linux's crc32c seeded with ~0, not inverted at the end: Go's
		// Checksum, which inverts at both ends, inverted.
		sum := ^crc32.Checksum(sb[:sbChecksum], crc32.MakeTable(crc32.Castagnoli))
		if sum != le.Uint32(sb[sbChecksum:]) {
			return false
		}
	}
	state := le.Uint16(sb[sbState:])
	return state&stateValid != 0 && state&(stateError|stateOrphans) == 0 &&
		le.Uint32(sb[sbIncompat:])&incompatRecover == 0 &&
		le.Uint32(sb[sbLastOrphan:]) == 0 && le.Uint32(sb[errorCountAt:]) == 0
}
