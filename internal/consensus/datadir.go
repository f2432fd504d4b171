package consensus

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/client/pkg/v3/types"
	"go.etcd.io/etcd/server/v3/storage/wal"
	"go.etcd.io/etcd/server/v3/storage/wal/walpb"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"
)

// DataDir is what an etcd data directory holds, read before etcd starts on
// it. etcd itself starts on whatever it finds: a directory without a WAL
// is a new member to it, which takes its membership from the flags, and
// one whose bbolt database outlived its WAL (a member stopped while it
// started) then panics applying its own entries ("member unknown"), as
// does one whose database does not list the member its WAL names: a VM's
// power cut loses the guest's unflushed database pages while the WAL,
// synced on every write, keeps entries that need the member. So a member
// that has not finished joining checks first (package cluster).
type DataDir struct {
	// Exists says the directory is there at all.
	Exists bool
	// WAL says it holds a write-ahead log, whose metadata names the
	// member and cluster (MemberID, ClusterID).
	WAL                 bool
	MemberID, ClusterID uint64
	// DB says it holds etcd's bbolt database; KnowsMember, that the
	// database lists MemberID among the cluster's members.
	DB, KnowsMember bool
}

func walDir(dir string) string { return filepath.Join(dir, "member", "wal") }
func dbFile(dir string) string { return filepath.Join(dir, "member", "snap", "db") }

// Inspect reads the etcd data directory dir without changing it.
func Inspect(dir string) (DataDir, error) {
	var d DataDir
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return d, nil
	} else if err != nil {
		return d, err
	}
	d.Exists = true
	if _, err := os.Stat(dbFile(dir)); err == nil {
		d.DB = true
	} else if !errors.Is(err, os.ErrNotExist) {
		return d, err
	}
	if !wal.Exist(walDir(dir)) {
		return d, nil
	}
	d.WAL = true
	md, err := walMetadata(walDir(dir))
	if err != nil {
		return d, fmt.Errorf("etcd's write-ahead log in %s: %w", walDir(dir), err)
	}
	d.MemberID, d.ClusterID = md.GetNodeID(), md.GetClusterID()
	if d.DB {
		if d.KnowsMember, err = listsMember(dbFile(dir), d.MemberID); err != nil {
			return d, fmt.Errorf("etcd's database %s: %w", dbFile(dir), err)
		}
	}
	return d, nil
}

// listsMember says whether the etcd database at path lists member id in
// its members bucket (etcd's schema.Members, keyed by the ID in hex). It
// opens the database read-only: etcd is not running on it yet.
func listsMember(path string, id uint64) (bool, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		return false, err
	}
	defer db.Close()
	known := false
	err = db.View(func(tx *bolt.Tx) error {
		if b := tx.Bucket([]byte("members")); b != nil {
			known = b.Get([]byte(types.ID(id).String())) != nil
		}
		return nil
	})
	return known, err
}

// walMetadata reads the metadata etcd wrote at the head of the WAL in
// dir, from its newest snapshot on (older segments may have been purged).
func walMetadata(dir string) (*etcdserverpb.Metadata, error) {
	lg := zap.NewNop()
	snaps, err := wal.ValidSnapshotEntries(lg, dir)
	if err != nil {
		return nil, err
	}
	start := &walpb.Snapshot{}
	if len(snaps) > 0 {
		start = snaps[len(snaps)-1]
	}
	w, err := wal.OpenForRead(lg, dir, start)
	if err != nil {
		return nil, err
	}
	defer w.Close()
	b, _, _, err := w.ReadAll()
	if err != nil && !errors.Is(err, wal.ErrSnapshotNotFound) {
		return nil, err
	}
	if b == nil {
		return nil, errors.New("no metadata record")
	}
	var md etcdserverpb.Metadata
	if err := proto.Unmarshal(b, &md); err != nil {
		return nil, fmt.Errorf("metadata: %w", err)
	}
	return &md, nil
}
