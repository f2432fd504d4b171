// Package space keeps a member's data volume from filling: a budget that
// sets etcd's quota from the volume at every start, and a keeper that
// watches the volume, raises and clears etcd's space alarm, compacts and
// defragments, one member at a time.
//
// # Why a budget
//
// etcd stays up when it is full only through its space alarm: once its
// database reaches its quota, it refuses writes (`database space
// exceeded`) and goes on serving reads and watches. Its default quota (2
// GiB) is larger than a small data volume, so the filesystem filled
// first, bbolt's write failed and etcd exited; after the reboot nothing
// started. The volume holds more than the database, and the quota has to
// leave room for all of it:
//
//   - Borough's own files: the log journal (5 boots of at most 8 MiB) and
//     its records, NodeBytes in all;
//   - a margin for the filesystem (a twentieth), and a ballast in two
//     halves: the keeper deletes one if the volume fills anyway while etcd
//     runs, to give it room to record its alarm, and the other only for
//     etcd to start on a full volume (a writer that fills the volume to its
//     last block eats the first half too);
//   - etcd's write-ahead log: its segments are preallocated, and it grows
//     by every request until etcd snapshots (every Snapshots entries),
//     when the segments before the snapshot may go;
//   - one defragmentation's copy of the database, as large as the
//     database at most (the same room takes a snapshot a lagging member
//     receives from its leader).
//
// What is left is shared equally by the database and its copy: the quota.
// The budget of a volume is computed afresh at every start, so a volume
// grown onto a larger disk gets a larger quota at its next boot.
package space

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Sizes of the budget.
const (
	MiB = int64(1) << 20
	GiB = int64(1) << 30
	// NodeBytes is the room of Borough's own files: the log journal (5
	// boots of 8 MiB, internal/logtree) and the records.
	NodeBytes = 48 * MiB
	// MaxRequestBytes is the largest request etcd takes (its default).
	MaxRequestBytes = 1536 << 10
	// WALFiles is how many WAL segments etcd keeps (embed.Config's
	// MaxWalFiles), however recent its last snapshot.
	WALFiles = 5
	// MinQuota is the smallest quota worth running etcd with.
	MinQuota = 64 * MiB
	// MaxQuota is the largest quota etcd takes.
	MaxQuota = 8 * GiB
)

// Budget is how a data volume's bytes are shared.
type Budget struct {
	// Volume is the filesystem's size.
	Volume int64
	// Node is Borough's own files; Margin the filesystem's slack; Ballast
	// the file the keeper deletes if the volume fills anyway.
	Node, Margin, Ballast int64
	// WAL is etcd's write-ahead log, in segments of Segment bytes, which
	// etcd may release at each snapshot, every Snapshots entries.
	WAL, Segment int64
	Snapshots    uint64
	// Defrag is one defragmentation's copy of the database.
	Defrag int64
	// Quota is etcd's backend quota: its space alarm fires there.
	Quota int64
}

// Plan is the budget of a volume of size bytes, or an error naming the
// smallest volume if this one leaves etcd too little.
func Plan(size int64) (Budget, error) {
	b := plan(size)
	if b.Quota < MinQuota {
		return Budget{}, fmt.Errorf("a data volume of %d MiB leaves etcd a quota of %d MiB, under the %d MiB it needs: use a disk of at least %d MiB",
			size/MiB, max(b.Quota, 0)/MiB, MinQuota/MiB, minVolume()/MiB)
	}
	return b, nil
}

// plan shares out a volume of size bytes, whether or not etcd fits.
func plan(size int64) Budget {
	b := Budget{Volume: size, Node: NodeBytes}
	b.Margin = size / 20
	b.Ballast = clamp(size/64, 16*MiB, 256*MiB)
	// A WAL of an eighth of the volume sets the segments' size and how
	// often etcd snapshots; its share is then what the log holds at the
	// worst: WALFiles segments, which etcd keeps whatever the snapshots,
	// or every entry since the last snapshot at the largest request,
	// the segment before it and the one preallocated.
	target := clamp(size/8, 64*MiB, 8*GiB)
	b.Segment = 8 * MiB
	for b.Segment < 64*MiB && b.Segment*16 <= target {
		b.Segment *= 2
	}
	b.Snapshots = uint64(clamp((target-3*b.Segment)/MaxRequestBytes, 100, 10000))
	sinceSnapshot := (int64(b.Snapshots)*MaxRequestBytes + b.Segment - 1) / b.Segment
	b.WAL = max(WALFiles+1, sinceSnapshot+2) * b.Segment
	left := size - b.Node - b.Margin - b.Ballast - b.WAL
	b.Quota = min(left/2, MaxQuota)
	b.Defrag = b.Quota
	return b
}

// minVolume is the smallest volume, in steps of 16 MiB, Plan accepts.
func minVolume() int64 {
	size := 16 * MiB
	for plan(size).Quota < MinQuota {
		size += 16 * MiB
	}
	return size
}

// Measure is the budget of the filesystem holding path.
func Measure(path string) (Budget, error) {
	size, _, err := Usage(path)
	if err != nil {
		return Budget{}, err
	}
	b, err := Plan(size)
	if err != nil {
		return Budget{}, fmt.Errorf("the data volume at %s: %w", path, err)
	}
	return b, nil
}

// Usage is the size of the filesystem holding path, and what is free on
// it to the node: the blocks statfs counts available, not free, for ext4
// counts free the clusters it keeps back for its own metadata, which no
// write of a file gets, so that a volume full to the node's writes still
// looked roomy (docs/decisions.md, "A full volume's last blocks").
func Usage(path string) (size, free int64, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, 0, fmt.Errorf("statfs %s: %w", path, err)
	}
	return int64(st.Blocks) * st.Bsize, int64(st.Bavail) * st.Bsize, nil
}

// Reserve is the free space under which the volume counts as full: the
// keeper stops etcd's writes there, before the filesystem refuses them.
func (b Budget) Reserve() int64 { return b.Margin / 2 }

func clamp(v, lo, hi int64) int64 { return min(max(v, lo), hi) }
