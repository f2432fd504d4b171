package backup

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/rand"
	"errors"
	"io"
	"testing"
	"time"

	"filippo.io/age"

	"github.com/borough-os/borough/internal/pki"
)

// TestReadWrite writes a backup of a snapshot of several frames and reads
// it back with the owner's key; then tries what a restore must refuse
// before it touches a disk: another owner's key, a truncated file, a
// flipped byte, a file that is no backup.
func TestReadWrite(t *testing.T) {
	owner, err := pki.NewOwner("owner", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	other, err := pki.NewOwner("owner", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	snapshot := make([]byte, 2*frameSize+12345)
	rand.Read(snapshot)
	var file bytes.Buffer
	var reported int64
	meta, err := Write(&file, owner.Cert, bytes.NewReader(snapshot), Meta{Cluster: "c1", Revision: 7}, func(n int64) { reported = n })
	if err != nil {
		t.Fatal(err)
	}
	if reported != int64(len(snapshot)) || meta.SnapshotSize != int64(len(snapshot)) {
		t.Errorf("progress said %d, meta %d bytes; the snapshot has %d", reported, meta.SnapshotSize, len(snapshot))
	}
	good := file.Bytes()
	flipped := bytes.Clone(good)
	flipped[len(flipped)/2] ^= 1
	// The payload begins after the header's last line ("--- MAC") with a
	// 16-byte nonce; its first chunk holds the magic.
	early := bytes.Clone(good)
	early[payloadStart(t, good)+20] ^= 1
	cases := []struct {
		name string
		file []byte
		key  *ecdsa.PrivateKey
		want error
	}{
		{"the owner's", good, owner.Key.(*ecdsa.PrivateKey), nil},
		{"another owner's key", good, other.Key.(*ecdsa.PrivateKey), ErrOwner},
		{"truncated", good[:len(good)-100], owner.Key.(*ecdsa.PrivateKey), ErrDamaged},
		{"truncated in the snapshot", good[:len(good)/2], owner.Key.(*ecdsa.PrivateKey), ErrDamaged},
		{"a flipped byte", flipped, owner.Key.(*ecdsa.PrivateKey), ErrDamaged},
		{"a flipped byte in its first chunk", early, owner.Key.(*ecdsa.PrivateKey), ErrDamaged},
		{"no backup", []byte("SQLite format 3\x00 and so on"), owner.Key.(*ecdsa.PrivateKey), ErrNotBackup},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			got, err := Read(bytes.NewReader(tc.file), tc.key, &out)
			if tc.want != nil {
				if !errors.Is(err, tc.want) {
					t.Fatalf("Read = %v, want %v", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(out.Bytes(), snapshot) || got.Cluster != "c1" || got.Revision != 7 || got.SnapshotSHA256 != meta.SnapshotSHA256 {
				t.Errorf("read back %d bytes, meta %+v", out.Len(), got)
			}
		})
	}
}

// TestReseal: a backup resealed to a node's transfer key opens with that
// key only, and holds the same snapshot and description; a backup the
// owner's key does not open is not resealed.
func TestReseal(t *testing.T) {
	owner, err := pki.NewOwner("owner", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	other, err := pki.NewOwner("owner", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	node, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	stranger, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	snapshot := make([]byte, frameSize+999)
	rand.Read(snapshot)
	var file bytes.Buffer
	meta, err := Write(&file, owner.Cert, bytes.NewReader(snapshot), Meta{Cluster: "c1", Revision: 9}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := Reseal(io.Discard, bytes.NewReader(file.Bytes()), other.Key.(*ecdsa.PrivateKey), node.Recipient()); !errors.Is(err, ErrOwner) {
		t.Errorf("resealing with another owner's key = %v, want %v", err, ErrOwner)
	}
	var resealed bytes.Buffer
	if err := Reseal(&resealed, bytes.NewReader(file.Bytes()), owner.Key.(*ecdsa.PrivateKey), node.Recipient()); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		id   age.Identity
		want error
	}{
		{"the node's transfer key", node, nil},
		{"another node's", stranger, ErrTransfer},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			got, err := Open(bytes.NewReader(resealed.Bytes()), tc.id, &out)
			if tc.want != nil {
				if !errors.Is(err, tc.want) {
					t.Fatalf("Open = %v, want %v", err, tc.want)
				}
				return
			}
			if err != nil || !bytes.Equal(out.Bytes(), snapshot) || got.SnapshotSHA256 != meta.SnapshotSHA256 || got.Revision != 9 {
				t.Errorf("Open = %d bytes, %+v, %v", out.Len(), got, err)
			}
		})
	}
}

// payloadStart is where the payload of the age file b begins: after its
// header's last line.
func payloadStart(t *testing.T, b []byte) int {
	t.Helper()
	mac := bytes.Index(b, []byte("\n--- "))
	if mac < 0 {
		t.Fatal("no age header")
	}
	return mac + 1 + bytes.IndexByte(b[mac+1:], '\n') + 1
}
