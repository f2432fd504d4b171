package backup

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"os"

	bolt "go.etcd.io/bbolt"
)

// CheckSnapshot checks the etcd snapshot at path as `etcdutl snapshot
// restore` would before it touches anything: the SHA-256 etcd appends to
// the database it sends matches the database, and the database opens as
// a bolt file with etcd's key bucket. It returns the number of key
// revisions the snapshot holds.
func CheckSnapshot(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	if len(b) < sha256.Size {
		return 0, fmt.Errorf("the snapshot %s has %d bytes: too short for etcd's", path, len(b))
	}
	db, sum := b[:len(b)-sha256.Size], b[len(b)-sha256.Size:]
	if got := sha256.Sum256(db); !bytes.Equal(got[:], sum) {
		return 0, fmt.Errorf("the snapshot %s does not match the SHA-256 etcd appended to it", path)
	}
	f, err := os.CreateTemp("", "borough-snapshot-*.db")
	if err != nil {
		return 0, err
	}
	defer os.Remove(f.Name())
	_, err = f.Write(db)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, err
	}
	bdb, err := bolt.Open(f.Name(), 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		return 0, fmt.Errorf("the snapshot %s is not a bolt database: %w", path, err)
	}
	defer bdb.Close()
	var keys int
	err = bdb.View(func(tx *bolt.Tx) error {
		bk := tx.Bucket([]byte("key"))
		if bk == nil {
			return fmt.Errorf("the snapshot %s has no etcd key bucket", path)
		}
		keys = bk.Stats().KeyN
		return nil
	})
	return keys, err
}
