package crypt

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// HeaderSize is the size of the header block at the start of the partition.
const HeaderSize = 4096

// sectorSize is the unit a disk writes atomically.
const sectorSize = 512

// probeSize is how much of the partition Probe reads: the header area and
// the first MiB of ciphertext. Other filesystems and volume formats put
// their superblocks in the first MiB, so data there means "not empty".
const probeSize = 2 << 20

// Header layout (little-endian). The checksum covers everything before it.
const (
	offMagic      = 0
	offVersion    = 8
	offKeySize    = 12
	offDataOffset = 16
	offCipher     = 24
	offSalt       = 56
	offKeyCheck   = 88
	offChecksum   = HeaderSize - sha256.Size
	cipherField   = 32
	// Version is the header version this package writes and reads.
	Version = 1
)

var (
	magicVolume = []byte("BOROUGHV")
	// magicIntent marks a volume being formatted: the header is not
	// written yet.
	magicIntent = []byte("BOROUGHI")
)

// Header is the parsed header of a formatted volume.
type Header struct {
	Salt     [32]byte
	KeyCheck [32]byte
}

// State is what Probe found on a partition.
type State int

const (
	// StateEmpty: all zeros. Safe to format.
	StateEmpty State = iota
	// StateFormatting: an intent record; a first boot crashed before
	// committing the header. Safe to format afresh.
	StateFormatting
	// StateFormatted: a valid Borough header. Never format.
	StateFormatted
	// StateDamaged: Borough's magic with a bad checksum or an unknown
	// version. Never format.
	StateDamaged
	// StateForeign: data that is not Borough's. Never format.
	StateForeign
)

func (s State) String() string {
	return [...]string{"empty", "formatting", "formatted", "damaged", "foreign"}[s]
}

// ErrDamaged is returned by Probe for StateDamaged.
var ErrDamaged = errors.New("Borough volume header is damaged")

// Marshal encodes h as a header block.
func (h *Header) Marshal() []byte {
	b := make([]byte, HeaderSize)
	copy(b[offMagic:], magicVolume)
	binary.LittleEndian.PutUint32(b[offVersion:], Version)
	binary.LittleEndian.PutUint32(b[offKeySize:], KeySize)
	binary.LittleEndian.PutUint64(b[offDataOffset:], DataOffset)
	copy(b[offCipher:offCipher+cipherField], Cipher)
	copy(b[offSalt:], h.Salt[:])
	copy(b[offKeyCheck:], h.KeyCheck[:])
	sum := sha256.Sum256(b[:offChecksum])
	copy(b[offChecksum:], sum[:])
	return b
}

// intentRecord is the block WriteIntent writes.
func intentRecord() []byte {
	b := make([]byte, HeaderSize)
	copy(b[offMagic:], magicIntent)
	binary.LittleEndian.PutUint32(b[offVersion:], Version)
	sum := sha256.Sum256(b[:offChecksum])
	copy(b[offChecksum:], sum[:])
	return b
}

// Probe reads the start of a partition and says what is there. For
// StateFormatted it returns the header; for StateDamaged, an error
// wrapping ErrDamaged that says what is wrong.
func Probe(r io.ReaderAt) (State, *Header, error) {
	b := make([]byte, probeSize)
	if _, err := r.ReadAt(b, 0); err != nil {
		return 0, nil, fmt.Errorf("reading volume header: %w", err)
	}
	switch {
	case bytes.Equal(b[:8], magicVolume):
		h, err := parse(b[:HeaderSize])
		if err != nil {
			return StateDamaged, nil, err
		}
		return StateFormatted, h, nil
	case bytes.Equal(b[:sectorSize], intentRecord()[:sectorSize]):
		// The intent record's first sector, whatever follows: WriteHeader
		// writes the header's first sector last, so a header torn by a
		// crash still reads as being formatted.
		return StateFormatting, nil, nil
	case isZero(b):
		return StateEmpty, nil, nil
	default:
		return StateForeign, nil, nil
	}
}

func parse(b []byte) (*Header, error) {
	sum := sha256.Sum256(b[:offChecksum])
	if !bytes.Equal(sum[:], b[offChecksum:]) {
		return nil, fmt.Errorf("%w: checksum mismatch", ErrDamaged)
	}
	if v := binary.LittleEndian.Uint32(b[offVersion:]); v != Version {
		return nil, fmt.Errorf("%w: version %d, this node reads version %d", ErrDamaged, v, Version)
	}
	cipher := string(bytes.TrimRight(b[offCipher:offCipher+cipherField], "\x00"))
	keySize := binary.LittleEndian.Uint32(b[offKeySize:])
	offset := binary.LittleEndian.Uint64(b[offDataOffset:])
	if cipher != Cipher || keySize != KeySize || offset != DataOffset {
		return nil, fmt.Errorf("%w: cipher %q, key size %d, data offset %d; want %q, %d, %d",
			ErrDamaged, cipher, keySize, offset, Cipher, KeySize, DataOffset)
	}
	h := &Header{}
	copy(h.Salt[:], b[offSalt:])
	copy(h.KeyCheck[:], b[offKeyCheck:])
	return h, nil
}

func isZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// Syncer is a partition open for writing.
type Syncer interface {
	io.WriterAt
	Sync() error
}

// WriteIntent marks the partition as being formatted, durably.
func WriteIntent(w Syncer) error {
	return writeBlock(w, intentRecord(), "intent record")
}

// WriteHeader commits h, durably. After it, the volume is formatted. The
// first sector, with the magic, is written last and alone: a sector write
// is atomic, so a crash leaves either the intent record's first sector
// (formatting) or a whole header.
func WriteHeader(w Syncer, h *Header) error {
	b := h.Marshal()
	if _, err := w.WriteAt(b[sectorSize:], sectorSize); err != nil {
		return fmt.Errorf("writing volume header: %w", err)
	}
	if err := w.Sync(); err != nil {
		return fmt.Errorf("flushing volume header: %w", err)
	}
	if _, err := w.WriteAt(b[:sectorSize], 0); err != nil {
		return fmt.Errorf("writing volume header: %w", err)
	}
	if err := w.Sync(); err != nil {
		return fmt.Errorf("flushing volume header: %w", err)
	}
	return nil
}

func writeBlock(w Syncer, b []byte, what string) error {
	if _, err := w.WriteAt(b, 0); err != nil {
		return fmt.Errorf("writing volume %s: %w", what, err)
	}
	if err := w.Sync(); err != nil {
		return fmt.Errorf("flushing volume %s: %w", what, err)
	}
	return nil
}
