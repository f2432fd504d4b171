package backup

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/rand"
	"errors"
	"testing"
	"time"

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
