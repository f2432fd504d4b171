// Package crypt owns the on-disk format of Borough's encrypted data
// partition and maps it with dm-crypt: the volume layer of the keys' map
// (docs/keys.md), deriving the volume key from the two unlock keys.
//
// # Layout
//
// The partition starts with a 4 KiB header, then padding to DataOffset
// (1 MiB), then the ciphertext: plain dm-crypt, aes-xts-plain64 with a
// 64-byte key (AES-256-XTS), 512-byte sectors, IVs counted from the start
// of the ciphertext. That is exactly what `cryptsetup open --type plain
// --cipher aes-xts-plain64 --key-size 512 --offset 2048` opens, so an
// operator holding the keys can recover the volume with standard tools.
//
// # Keys
//
// The volume key is HKDF-SHA256 over the local unlock key (LUK) and the
// cluster unlock key (CUK), salted with the header's random salt. Neither
// key alone reveals anything about the volume key. The header stores a key
// check value, derived from the same secret with another HKDF label, so a
// wrong key is told apart from a damaged volume without decrypting
// anything, and the check value reveals nothing about the volume key.
//
// # What is and is not protected
//
// Confidentiality of data at rest against someone holding the disk without
// both keys. Not integrity: XTS without dm-integrity does not detect
// tampering, only (through the filesystem) gross corruption. Discards are
// not passed down, so the pattern of free space is not revealed either.
//
// # Formatting safely
//
// Probe classifies a partition before anything touches it. A new volume
// is made in this order: intent record (WriteIntent), mapping and mkfs,
// then the header (WriteHeader) last. A crash before the header leaves an
// intent record, which the next boot formats afresh; once the header is
// written, the partition is never formatted again. A partition that is
// neither empty nor Borough's is never formatted.
package crypt

import (
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/borough-os/borough/internal/devmapper"
)

const (
	// Cipher is the dm-crypt cipher specification.
	Cipher = "aes-xts-plain64"
	// KeySize is the volume key's size: two AES-256 keys for XTS.
	KeySize = 64
	// UnlockKeySize is the size of the LUK and of the CUK.
	UnlockKeySize = 32
	// DataOffset is where the ciphertext starts, in 512-byte sectors.
	DataOffset = 2048
)

// HKDF labels. Changing them changes every key: they are part of the
// on-disk format.
const (
	volumeKeyInfo = "borough data volume key v1"
	keyCheckInfo  = "borough data volume key check v1"
)

func secret(luk, cuk []byte) ([]byte, error) {
	if len(luk) != UnlockKeySize || len(cuk) != UnlockKeySize {
		return nil, fmt.Errorf("unlock keys are %d and %d bytes, want %d each", len(luk), len(cuk), UnlockKeySize)
	}
	return append(append(make([]byte, 0, 2*UnlockKeySize), luk...), cuk...), nil
}

// VolumeKey derives the dm-crypt key from the two unlock keys and the
// header's salt.
func VolumeKey(luk, cuk, salt []byte) ([]byte, error) {
	s, err := secret(luk, cuk)
	if err != nil {
		return nil, err
	}
	defer clear(s)
	return hkdf.Key(sha256.New, s, salt, volumeKeyInfo, KeySize)
}

// KeyCheck derives the key check value stored in the header.
func KeyCheck(luk, cuk, salt []byte) ([]byte, error) {
	s, err := secret(luk, cuk)
	if err != nil {
		return nil, err
	}
	defer clear(s)
	return hkdf.Key(sha256.New, s, salt, keyCheckInfo, 32)
}

// Table returns the dm-crypt target parameters for a volume on the device
// dev (major:minor) with the given key. They hold the key: clear them
// after use. Built in one buffer of the final size, so that no other copy
// of the key is left in memory.
func Table(key []byte, dev string) []byte {
	tail := fmt.Sprintf(" 0 %s %d", dev, DataOffset)
	b := make([]byte, 0, len(Cipher)+1+hex.EncodedLen(len(key))+len(tail))
	b = append(b, Cipher+" "...)
	b = hex.AppendEncode(b, key)
	return append(b, tail...)
}

// Map maps the volume on the partition at path, which is sectors 512-byte
// sectors long, as /dev/mapper/name, and returns the mapped device.
func Map(name, path string, sectors uint64, key []byte) (string, error) {
	if len(key) != KeySize {
		return "", fmt.Errorf("volume key is %d bytes, want %d", len(key), KeySize)
	}
	if sectors <= DataOffset {
		return "", fmt.Errorf("partition %s has %d sectors, too few for a volume", path, sectors)
	}
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return "", &os.PathError{Op: "stat", Path: path, Err: err}
	}
	dev := fmt.Sprintf("%d:%d", unix.Major(st.Rdev), unix.Minor(st.Rdev))
	params := Table(key, dev)
	defer clear(params)
	return devmapper.Create(name, []devmapper.Target{{
		Length: sectors - DataOffset, Type: "crypt", Params: params,
	}})
}

// Unmap removes the mapping named name.
func Unmap(name string) error {
	return devmapper.Remove(name)
}

// ErrWrongKey says the unlock keys are not the ones the volume was made
// with.
var ErrWrongKey = errors.New("the unlock keys do not match this volume")

// NewHeader returns the header of a new volume made with luk and cuk and a
// fresh random salt.
func NewHeader(luk, cuk []byte) (*Header, error) {
	h := &Header{}
	if _, err := rand.Read(h.Salt[:]); err != nil {
		return nil, err
	}
	kcv, err := KeyCheck(luk, cuk, h.Salt[:])
	if err != nil {
		return nil, err
	}
	copy(h.KeyCheck[:], kcv)
	return h, nil
}

// VolumeKey checks luk and cuk against the header's key check value and
// returns the volume key, or ErrWrongKey.
func (h *Header) VolumeKey(luk, cuk []byte) ([]byte, error) {
	kcv, err := KeyCheck(luk, cuk, h.Salt[:])
	if err != nil {
		return nil, err
	}
	if subtle.ConstantTimeCompare(kcv, h.KeyCheck[:]) != 1 {
		return nil, ErrWrongKey
	}
	return VolumeKey(luk, cuk, h.Salt[:])
}
