package crypt

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
)

func key(b byte) []byte { return bytes.Repeat([]byte{b}, UnlockKeySize) }

// hkdfRef is RFC 5869 written out with HMAC, to check the library use.
func hkdfRef(secret, salt []byte, info string, n int) []byte {
	ext := hmac.New(sha256.New, salt)
	ext.Write(secret)
	prk := ext.Sum(nil)
	var out, t []byte
	for i := byte(1); len(out) < n; i++ {
		m := hmac.New(sha256.New, prk)
		m.Write(t)
		m.Write([]byte(info))
		m.Write([]byte{i})
		t = m.Sum(nil)
		out = append(out, t...)
	}
	return out[:n]
}

func TestKeyDerivation(t *testing.T) {
	luk, cuk, salt := key(1), key(2), bytes.Repeat([]byte{3}, 32)
	secret := append(append([]byte{}, luk...), cuk...)
	vk, err := VolumeKey(luk, cuk, salt)
	if err != nil {
		t.Fatal(err)
	}
	if want := hkdfRef(secret, salt, volumeKeyInfo, KeySize); !bytes.Equal(vk, want) {
		t.Errorf("VolumeKey = %x, want %x", vk, want)
	}
	kcv, err := KeyCheck(luk, cuk, salt)
	if err != nil {
		t.Fatal(err)
	}
	if want := hkdfRef(secret, salt, keyCheckInfo, 32); !bytes.Equal(kcv, want) {
		t.Errorf("KeyCheck = %x, want %x", kcv, want)
	}
	// Pinned: the on-disk format depends on these exact bytes.
	const pinned = "26f1c889"
	if got := hex.EncodeToString(vk[:4]); got != pinned {
		t.Errorf("VolumeKey starts %s, pinned %s: the key derivation changed", got, pinned)
	}
	if bytes.Contains(vk, kcv[:8]) {
		t.Error("key check value overlaps the volume key")
	}
	for _, tc := range []struct {
		name     string
		luk, cuk []byte
	}{
		{"swapped", cuk, luk}, {"other luk", key(9), cuk}, {"other cuk", luk, key(9)},
	} {
		other, _ := VolumeKey(tc.luk, tc.cuk, salt)
		if bytes.Equal(other, vk) {
			t.Errorf("%s: same volume key", tc.name)
		}
	}
	if _, err := VolumeKey(luk[:16], cuk, salt); err == nil {
		t.Error("a short LUK was accepted")
	}
}

func TestHeaderVolumeKey(t *testing.T) {
	h, err := NewHeader(key(1), key(2))
	if err != nil {
		t.Fatal(err)
	}
	vk, err := h.VolumeKey(key(1), key(2))
	if err != nil {
		t.Fatalf("VolumeKey with the right keys: %v", err)
	}
	want, _ := VolumeKey(key(1), key(2), h.Salt[:])
	if !bytes.Equal(vk, want) {
		t.Error("VolumeKey differs from the derivation")
	}
	for _, tc := range []struct{ luk, cuk []byte }{{key(1), key(3)}, {key(3), key(2)}} {
		if _, err := h.VolumeKey(tc.luk, tc.cuk); !errors.Is(err, ErrWrongKey) {
			t.Errorf("VolumeKey with a wrong key = %v, want ErrWrongKey", err)
		}
	}
	h2, _ := NewHeader(key(1), key(2))
	if h2.Salt == h.Salt {
		t.Error("two headers share a salt")
	}
}

// disk is an in-memory partition.
type disk []byte

func (d disk) ReadAt(p []byte, off int64) (int, error)  { return copy(p, d[off:]), nil }
func (d disk) WriteAt(p []byte, off int64) (int, error) { return copy(d[off:], p), nil }
func (d disk) Sync() error                              { return nil }

func TestProbe(t *testing.T) {
	h, _ := NewHeader(key(1), key(2))
	for _, tc := range []struct {
		name    string
		prepare func(d disk)
		want    State
		wantErr string
	}{
		{"empty", func(disk) {}, StateEmpty, ""},
		{"data past the probed area", func(d disk) { d[probeSize] = 1 }, StateEmpty, ""},
		{"intent", func(d disk) { WriteIntent(d) }, StateFormatting, ""},
		{"intent then ciphertext", func(d disk) { WriteIntent(d); d[DataOffset*512] = 7 }, StateFormatting, ""},
		{"formatted", func(d disk) { WriteHeader(d, h) }, StateFormatted, ""},
		{"ext4 superblock", func(d disk) { d[1024+56], d[1024+57] = 0x53, 0xEF }, StateForeign, ""},
		{"a stray byte in the ciphertext area", func(d disk) { d[1<<20] = 1 }, StateForeign, ""},
		{"garbled intent", func(d disk) { WriteIntent(d); d[100] = 1 }, StateForeign, ""},
		{"header torn before its first sector", func(d disk) {
			WriteIntent(d)
			copy(d[sectorSize:HeaderSize], h.Marshal()[sectorSize:])
		}, StateFormatting, ""},
		{"flipped header bit", func(d disk) { WriteHeader(d, h); d[offSalt] ^= 1 }, StateDamaged, "checksum mismatch"},
		{"future version", func(d disk) {
			WriteHeader(d, h)
			binary.LittleEndian.PutUint32(d[offVersion:], 2)
			sum := sha256.Sum256(d[:offChecksum])
			copy(d[offChecksum:], sum[:])
		}, StateDamaged, "version 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := make(disk, probeSize+4096)
			tc.prepare(d)
			got, hdr, err := Probe(d)
			if got != tc.want {
				t.Errorf("Probe = %v, want %v", got, tc.want)
			}
			if tc.wantErr != "" {
				if !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("Probe error = %v, want ErrDamaged with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.want == StateFormatted && *hdr != *h {
				t.Errorf("Probe header = %+v, want %+v", hdr, h)
			}
		})
	}
}

func TestTable(t *testing.T) {
	k := bytes.Repeat([]byte{0xab}, KeySize)
	got := Table(k, "254:2")
	want := "aes-xts-plain64 " + strings.Repeat("ab", KeySize) + " 0 254:2 2048"
	if string(got) != want {
		t.Errorf("Table = %q, want %q", got, want)
	}
}
