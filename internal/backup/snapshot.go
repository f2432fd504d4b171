package backup

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"os"

	bolt "go.etcd.io/bbolt"
)

// CheckSnapshot checks the etcd snapshot at path as `etcdutl snapshot
// restore` would before it touches anything: the SHA-256 etcd appends to
// the database it sends matches the database, and the database opens as
// a bolt file with etcd's key bucket. It returns the number of key
// revisions the snapshot holds.
func CheckSnapshot(path string) (int, error) {
	db, err := stripHash(path)
	if err != nil {
		return 0, err
	}
	defer os.Remove(db)
	bdb, err := bolt.Open(db, 0o600, &bolt.Options{ReadOnly: true})
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

// stripHash copies the database of the snapshot at path, without the
// SHA-256 etcd appended, to a temporary file, in one pass that checks
// the hash, and returns the copy's path.
func stripHash(path string) (string, error) {
	in, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return "", err
	}
	size := st.Size() - sha256.Size
	if size < 0 {
		return "", fmt.Errorf("the snapshot %s has %d bytes: too short for etcd's", path, st.Size())
	}
	out, err := os.CreateTemp("", "borough-snapshot-*.db")
	if err != nil {
		return "", err
	}
	sum := sha256.New()
	_, err = io.Copy(io.MultiWriter(out, sum), io.LimitReader(in, size))
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	want := make([]byte, sha256.Size)
	if err == nil {
		_, err = io.ReadFull(in, want)
	}
	if err == nil && !bytes.Equal(sum.Sum(nil), want) {
		err = fmt.Errorf("the snapshot %s does not match the SHA-256 etcd appended to it", path)
	}
	if err != nil {
		os.Remove(out.Name())
		return "", err
	}
	return out.Name(), nil
}
