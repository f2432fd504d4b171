// Package verity builds the dm-verity hash tree of a read-only image, and
// the device-mapper table that checks the image against it as the kernel
// reads it.
//
// The node payload is a squashfs image on the ESP. Checking it whole at
// boot meant reading and hashing all of it before the node could start;
// with dm-verity the kernel checks each 4 KiB block when it is first read
// against a tree whose root hash is in the measured initramfs, so the boot
// reads only what the node touches and integrity still covers all of it.
//
// The format is dm-verity's version 1 as veritysetup writes it with
// --no-superblock --hash sha512: SHA-512 of the salt followed by the
// block, 4 KiB data and hash blocks, the tree appended to the data with
// its top level first. SHA-512 rather than veritysetup's default SHA-256
// because the kernel hashes every block the boot reads, and on 64-bit
// CPUs SHA-512 does a byte in fewer operations (docs/decisions.md,
// "dm-verity's hash").
//
// It is written here because no Go module of it is served here (Monogon's
// is inside its monorepo); TestVeritysetup checks it, byte for byte,
// against veritysetup of cryptsetup.
package verity

import (
	"bytes"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
)

// BlockSize is the size of data and hash blocks.
const BlockSize = 4096

// Algorithm is the kernel's name of the tree's hash.
const Algorithm = "sha512"

// Descriptor is what checks an image: its root hash, salt and size.
type Descriptor struct {
	Root, Salt []byte
	// DataBlocks is the image's size in blocks; its hash tree starts at
	// that block.
	DataBlocks uint64
}

// Build returns data padded to whole blocks with its hash tree appended,
// and the tree's descriptor. The salt is derived from data, so that one
// image always makes the same tree.
func Build(data []byte) ([]byte, Descriptor) {
	salt := sha256.Sum256(append([]byte("borough verity salt\x00"), data...))
	return BuildSalted(data, salt[:])
}

// BuildSalted is Build with the given salt.
func BuildSalted(data, salt []byte) ([]byte, Descriptor) {
	out := pad(bytes.Clone(data))
	d := Descriptor{Salt: bytes.Clone(salt), DataBlocks: uint64(len(out) / BlockSize)}
	if d.DataBlocks == 1 {
		// One data block needs no tree: the root is its hash.
		d.Root = hashBlocks(out, salt)
		return out, d
	}
	// Each level hashes the one below it, up to a level of one block,
	// whose hash is the root; the top level comes first on the device.
	var levels [][]byte
	for below := out; len(below) > BlockSize; below = levels[len(levels)-1] {
		levels = append(levels, pad(hashBlocks(below, salt)))
	}
	d.Root = hashBlocks(levels[len(levels)-1], salt)
	for i := len(levels) - 1; i >= 0; i-- {
		out = append(out, levels[i]...)
	}
	return out, d
}

// hashBlocks is the concatenated digests of b's blocks.
func hashBlocks(b, salt []byte) []byte {
	out := make([]byte, 0, len(b)/BlockSize*sha512.Size)
	for off := 0; off < len(b); off += BlockSize {
		h := sha512.New()
		h.Write(salt)
		h.Write(b[off : off+BlockSize])
		out = h.Sum(out)
	}
	return out
}

// pad pads b with zeros to whole blocks, at least one.
func pad(b []byte) []byte {
	n := max(1, (len(b)+BlockSize-1)/BlockSize)
	return append(b, make([]byte, n*BlockSize-len(b))...)
}

// Sectors is the size of the checked device, in 512-byte sectors.
func (d Descriptor) Sectors() uint64 { return d.DataBlocks * BlockSize / 512 }

// Params are the parameters of the device-mapper verity target that
// checks the image on dev, data and tree on the one device.
func (d Descriptor) Params(dev string) string {
	return fmt.Sprintf("1 %s %s %d %d %d %d %s %x %x",
		dev, dev, BlockSize, BlockSize, d.DataBlocks, d.DataBlocks, Algorithm, d.Root, d.Salt)
}

// String is the descriptor as Parse reads it: root hash, salt and data
// blocks.
func (d Descriptor) String() string {
	return fmt.Sprintf("%x %x %d", d.Root, d.Salt, d.DataBlocks)
}

// Parse reads a descriptor that String wrote.
func Parse(s string) (Descriptor, error) {
	f := strings.Fields(s)
	if len(f) != 3 {
		return Descriptor{}, fmt.Errorf("verity descriptor %q: want root hash, salt and data blocks", s)
	}
	root, err := hex.DecodeString(f[0])
	if err != nil || len(root) != sha512.Size {
		return Descriptor{}, fmt.Errorf("verity descriptor %q: the root hash is not %d bytes of hex", s, sha512.Size)
	}
	salt, err := hex.DecodeString(f[1])
	if err != nil || len(salt) == 0 {
		return Descriptor{}, fmt.Errorf("verity descriptor %q: the salt is not hex", s)
	}
	blocks, err := strconv.ParseUint(f[2], 10, 64)
	if err != nil || blocks == 0 {
		return Descriptor{}, fmt.Errorf("verity descriptor %q: data blocks is not a positive number", s)
	}
	return Descriptor{Root: root, Salt: salt, DataBlocks: blocks}, nil
}
