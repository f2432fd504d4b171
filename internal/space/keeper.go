package space

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"golang.org/x/sys/unix"

	"github.com/borough-os/borough/internal/keyspace"
)

// The keeper.
//
// Each member runs one. Its alarm is its own: etcd raises a member's
// space alarm when a write through it would take its database past its
// quota, and while any member's alarm is raised the whole cluster refuses
// writes. So the alarm list is the list of members that are full, and
// the keeper keeps it true: it raises its member's alarm when the
// database is over its quota or the volume is down to its reserve (the
// filesystem filling by someone else's doing), and clears it once both
// are back with room to spare. Writes come back when the last member has
// cleared its own, without anyone running etcdctl.
//
// Space comes back by compaction and defragmentation. etcd's periodic
// compaction (an hour's history) stays; while an alarm is raised the
// keeper also compacts to the latest revision, as writes are refused
// anyway and deleted keys should give their space back now. A member
// defragments when it is worth it: Worth. Defragmenting stops the member
// serving while bbolt copies its database, so one member does it at a
// time, never during a rollout, and a leader first hands its leadership
// to another voter (the cluster elects no one; it moves). While etcd
// takes writes, one at a time is a lock in etcd (keyspace.DefragLock);
// while it refuses them no lock can be taken (a lock is a write), and the
// members take turns by the clock instead: member i of n (by name, the
// leader last) may start only in slot i of every n slots of slotLength.
// A member that defragments stays a voter: raft goes on persisting and
// acknowledging entries while the database is copied, so no quorum is
// lost, only that member's reads and writes wait. Its disk is busy with
// the copy all the same, so a member starts only while the other voters
// it is connected to make a quorum without it (all of them, in a cluster
// of two, where the others alone never can): a cluster already down to
// its quorum waits until its missing member is back (quorumWithout).

// Intervals of the keeper's rounds: calm, and while an alarm is raised
// or the volume is near its reserve. Apart from the rounds, which wait on
// etcd, it glances at the volume's free space (a statfs) every glance,
// so that someone else filling the volume fast meets the ballast's
// release and a round within a second.
const (
	calm   = 15 * time.Second
	urgent = 2 * time.Second
	glance = time.Second
)

// slotLength is a member's turn to defragment while writes are refused;
// startWithin how far into its slot it may still start.
const (
	slotLength  = 30 * time.Second
	startWithin = 20 * time.Second
)

// reportEvery bounds how often a member rewrites an unchanged report.
const reportEvery = time.Minute

// Worth says whether a database of db bytes, of which inUse hold data,
// is worth defragmenting: a quarter of it free, and at least 16 MiB (a
// copy of a small database costs more than it gives back).
func Worth(db, inUse int64) bool {
	free := db - inUse
	return free >= 16*MiB && free*4 >= db
}

// Keeper keeps one member's space.
type Keeper struct {
	// Client is the member's own client, as root.
	Client *clientv3.Client
	// Name and ID are the member's.
	Name string
	ID   uint64
	// Volume is the data volume's root; Ballast and StartBallast the two
	// halves of the ballast on it (datavol.Ballast, datavol.StartBallast).
	Volume, Ballast, StartBallast string
	Budget                        Budget
	// Raise raises the member's space alarm (etcd's client has no call
	// for it: etcd raises it itself when a write is refused).
	Raise func(context.Context) error
	// Connected says which members this one has a live raft connection to.
	Connected func() map[uint64]bool
	// Alarms are the alarms the member knows, read from its own store:
	// etcd's AlarmList is a raft entry, and on a volume with no room left
	// every entry brings etcd's next snapshot or WAL segment, which it
	// cannot write, nearer.
	Alarms func() []*pb.AlarmMember
	Log    *slog.Logger

	reported      keyspace.SpaceReport
	alarmed       atomic.Bool
	compacted     int64
	waitingQuorum bool
}

// round is what one look at the member saw.
type round struct {
	status  *clientv3.StatusResponse
	alarms  []*pb.AlarmMember
	size    int64
	free    int64
	members []*pb.Member
}

// mine says whether the member's space alarm is raised; any whether any
// member's is.
func (r round) mine(id uint64) bool {
	return slices.ContainsFunc(r.alarms, func(a *pb.AlarmMember) bool { return a.MemberID == id && a.Alarm == pb.AlarmType_NOSPACE })
}

func (r round) any() bool {
	return slices.ContainsFunc(r.alarms, func(a *pb.AlarmMember) bool { return a.Alarm == pb.AlarmType_NOSPACE })
}

// Run keeps the member's space until ctx ends. Its first round waits a
// calm interval, unless the volume is near its reserve: etcd keeps its
// alarm across restarts, and a member's first seconds are its cluster's
// busiest; but a member that starts on a volume filled by someone else
// (its ballast deleted for etcd to start: ClearForStart) raises its
// alarm at once.
func (k *Keeper) Run(ctx context.Context) error {
	k.restoreReport(ctx)
	first := calm
	if _, free, err := Usage(k.Volume); err == nil {
		k.placeBallast(free)
		if free < k.Budget.Reserve()+k.Budget.Ballast {
			first = 0
		}
	}
	wake := make(chan struct{}, 1)
	go k.glance(ctx, wake)
	t := time.NewTimer(first)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-wake:
		case <-t.C:
		}
		next, err := k.round(ctx)
		if err != nil && ctx.Err() == nil {
			k.Log.Warn("keeping the data volume's space", "err", err)
		}
		t.Reset(next)
	}
}

// glance looks at the volume every glance until ctx ends, apart from the
// rounds, which a slow or stuck etcd holds up: it releases the running
// half of the ballast once the volume is down to half its reserve, and
// wakes a round while it is under its reserve and no alarm is raised
// yet.
func (k *Keeper) glance(ctx context.Context, wake chan<- struct{}) {
	tick := time.NewTicker(glance)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		_, free, err := Usage(k.Volume)
		if err != nil || free >= k.Budget.Reserve() {
			continue
		}
		if free < k.Budget.Reserve()/2 {
			k.releaseBallast(free)
		}
		if k.alarmed.Load() {
			continue
		}
		select {
		case wake <- struct{}{}:
		default:
		}
	}
}

// round looks at the member once, acts, and says when to look again.
func (k *Keeper) round(ctx context.Context) (time.Duration, error) {
	r, err := k.look(ctx)
	if err != nil {
		return calm, err
	}
	k.placeBallast(r.free)
	if err := k.keepAlarm(ctx, r); err != nil {
		return urgent, err
	}
	if r.any() {
		k.compact(ctx, r)
	}
	if why := k.why(ctx, r); why != "" {
		if err := k.defragment(ctx, r, why); err != nil {
			k.Log.Warn("defragmenting etcd's database", "err", err)
		}
		if r, err = k.look(ctx); err != nil {
			return calm, err
		}
	}
	k.report(ctx, r)
	if r.any() || r.free < k.Budget.Reserve()+k.Budget.Ballast {
		return urgent, nil
	}
	return calm, nil
}

func (k *Keeper) look(ctx context.Context) (round, error) {
	var r round
	var err error
	if r.status, err = k.Client.Status(ctx, ""); err != nil {
		return r, fmt.Errorf("etcd's status: %w", err)
	}
	r.alarms = k.Alarms()
	if r.size, r.free, err = Usage(k.Volume); err != nil {
		return r, err
	}
	members, err := k.Client.MemberList(ctx, clientv3.WithSerializable())
	if err != nil {
		return r, fmt.Errorf("etcd's members: %w", err)
	}
	r.members = members.Members
	return r, nil
}

// keepAlarm raises the member's alarm when it is full, and clears it once
// it has room again: a twentieth of its quota under it, and the ballast's
// worth over its reserve on the volume.
func (k *Keeper) keepAlarm(ctx context.Context, r round) error {
	db, reserve := r.status.DbSize, k.Budget.Reserve()
	full := db >= k.Budget.Quota || r.free < reserve
	roomy := db < k.Budget.Quota-k.Budget.Quota/20 && r.free >= reserve+k.Budget.Ballast
	mine := r.mine(k.ID)
	switch {
	case full && !mine:
		k.Log.Error("etcd's space alarm: the cluster refuses writes until space comes back",
			"db", mib(db), "in_use", mib(r.status.DbSizeInUse), "quota", mib(k.Budget.Quota), "volume_free", mib(r.free), "reserve", mib(reserve))
		if err := k.Raise(ctx); err != nil {
			return fmt.Errorf("raising the space alarm: %w", err)
		}
	case mine && roomy:
		if _, err := k.Client.AlarmDisarm(ctx, &clientv3.AlarmMember{MemberID: k.ID, Alarm: pb.AlarmType_NOSPACE}); err != nil {
			return fmt.Errorf("clearing the space alarm: %w", err)
		}
		k.Log.Info("etcd's space alarm cleared: this member has room again",
			"db", mib(db), "in_use", mib(r.status.DbSizeInUse), "quota", mib(k.Budget.Quota), "volume_free", mib(r.free))
	case mine && !k.alarmed.Load():
		k.Log.Warn("etcd's space alarm is raised for this member: writes are refused",
			"db", mib(db), "in_use", mib(r.status.DbSizeInUse), "quota", mib(k.Budget.Quota), "volume_free", mib(r.free))
	}
	k.alarmed.Store(mine || full)
	return nil
}

// releaseBallast deletes the running half of the ballast, if it is there,
// for etcd to keep its alarm on a volume down to half its reserve; the
// other half waits for etcd's next start (ClearForStart).
func (k *Keeper) releaseBallast(free int64) {
	if err := os.Remove(k.Ballast); err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			k.Log.Error("deleting the ballast of a full volume", "err", err)
		}
		return
	}
	k.Log.Error("the data volume is full: half its ballast is deleted, for etcd to keep its alarm; the other half waits for etcd's next start",
		"free", mib(free))
}

// placeBallast puts back either half of the ballast that is missing once
// there is room for the whole ballast and the reserve twice over.
func (k *Keeper) placeBallast(free int64) {
	if free <= 2*(k.Budget.Reserve()+k.Budget.Ballast) {
		return
	}
	for _, path := range []string{k.Ballast, k.StartBallast} {
		if err := PlaceBallast(path, k.Budget.Ballast/2); err != nil {
			k.Log.Warn("placing the data volume's ballast", "err", err)
		}
	}
}

// PlaceBallast makes the ballast file of size bytes, its blocks
// allocated, if there is none.
func PlaceBallast(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("ballast: %w", err)
	}
	if err := unix.Fallocate(int(f.Fd()), 0, 0, size); err != nil {
		f.Close()
		os.Remove(path)
		return fmt.Errorf("ballast %s: %w", path, err)
	}
	return f.Close()
}

// ClearForStart deletes the ballast, both halves at paths, if the volume
// at root has less than reserve free: etcd cannot start on a full
// filesystem. It says whether it deleted any.
func ClearForStart(root string, reserve int64, paths ...string) (bool, error) {
	_, free, err := Usage(root)
	if err != nil || free >= reserve {
		return false, err
	}
	cleared := false
	for _, path := range paths {
		err := os.Remove(path)
		switch {
		case err == nil:
			cleared = true
		case !errors.Is(err, os.ErrNotExist):
			return cleared, fmt.Errorf("deleting the ballast: %w", err)
		}
	}
	return cleared, nil
}

// compact compacts to the latest revision, while an alarm is raised, once
// a revision: each compaction is a raft entry.
func (k *Keeper) compact(ctx context.Context, r round) {
	rev := r.status.Header.Revision
	if rev <= k.compacted {
		return
	}
	_, err := k.Client.Compact(ctx, rev, clientv3.WithCompactPhysical())
	switch {
	case err == nil:
		k.Log.Info("compacted to the latest revision while writes are refused", "revision", rev)
	case !errors.Is(rpctypes.Error(err), rpctypes.ErrCompacted):
		k.Log.Warn("compacting while writes are refused", "revision", rev, "err", err)
		return
	}
	k.compacted = rev
}

// why says why the member should defragment now, or "" if it should not.
func (k *Keeper) why(ctx context.Context, r round) string {
	db, inUse := r.status.DbSize, r.status.DbSizeInUse
	reason := ""
	switch {
	case r.mine(k.ID) && db >= k.Budget.Quota && inUse < k.Budget.Quota-k.Budget.Quota/10:
		reason = "over its quota, with room to give back"
	case Worth(db, inUse):
		reason = "a quarter of its database free"
	}
	if req, err := k.Client.Get(ctx, keyspace.DefragRequest); err == nil && len(req.Kvs) > 0 && req.Kvs[0].ModRevision > k.reported.Request {
		reason = "the owner asked"
	}
	if reason == "" {
		return ""
	}
	if rollout, err := k.Client.Get(ctx, keyspace.Rollout, clientv3.WithCountOnly()); err != nil || rollout.Count > 0 {
		return ""
	}
	connected, need := quorumWithout(r.members, k.ID, k.Connected())
	waiting := connected < need
	if waiting && !k.waitingQuorum {
		k.Log.Warn("not defragmenting yet: the other voters this member is connected to would not make a quorum without it",
			"why", reason, "connected", connected, "need", need)
	}
	k.waitingQuorum = waiting
	if waiting {
		return ""
	}
	return reason
}

// quorumWithout counts the other voters among members that connected
// holds, and says how many a member needs before it defragments: a
// quorum of the voters, or all the others when they are fewer than that
// (a lone voter needs none).
func quorumWithout(members []*pb.Member, self uint64, connected map[uint64]bool) (have, need int) {
	voters := 0
	for _, m := range members {
		if m.IsLearner {
			continue
		}
		voters++
		if m.ID != self && connected[m.ID] {
			have++
		}
	}
	return have, min(voters/2+1, voters-1)
}

// defragment defragments the member, in its turn.
func (k *Keeper) defragment(ctx context.Context, r round, why string) error {
	if r.any() {
		if !k.turn(r, time.Now()) {
			return nil
		}
		return k.defragmentNow(ctx, r, why)
	}
	s, err := concurrency.NewSession(k.Client, concurrency.WithTTL(int(slotLength/time.Second)), concurrency.WithContext(ctx))
	if err != nil {
		return fmt.Errorf("a session for the defragmentation lock: %w", err)
	}
	defer s.Close()
	lock := concurrency.NewMutex(s, keyspace.DefragLock)
	if err := lock.TryLock(ctx); err != nil {
		if errors.Is(err, concurrency.ErrLocked) {
			return nil
		}
		return fmt.Errorf("taking the defragmentation lock: %w", err)
	}
	defer lock.Unlock(context.WithoutCancel(ctx))
	return k.defragmentNow(ctx, r, why)
}

// turn says whether it is the member's turn while writes are refused:
// slot i of n, the members ordered by name with the leader last.
func (k *Keeper) turn(r round, now time.Time) bool {
	order := slices.Clone(r.members)
	slices.SortFunc(order, func(a, b *pb.Member) int {
		al, bl := a.ID == r.status.Leader, b.ID == r.status.Leader
		switch {
		case al != bl && al:
			return 1
		case al != bl:
			return -1
		}
		return strings.Compare(a.Name, b.Name)
	})
	i := slices.IndexFunc(order, func(m *pb.Member) bool { return m.ID == k.ID })
	if i < 0 {
		return false
	}
	slot := now.UnixNano() / int64(slotLength)
	into := time.Duration(now.UnixNano() % int64(slotLength))
	return slot%int64(len(order)) == int64(i) && into < startWithin
}

// defragmentNow moves the leadership away if the member leads, then
// defragments it.
func (k *Keeper) defragmentNow(ctx context.Context, r round, why string) error {
	if r.status.Leader == k.ID {
		if to := k.transferee(r); to != 0 {
			if _, err := k.Client.MoveLeader(ctx, to); err != nil {
				return fmt.Errorf("handing the leadership over before defragmenting: %w", err)
			}
			k.Log.Info("handed the leadership over to defragment", "to", fmt.Sprintf("%x", to))
		}
	}
	start := time.Now()
	k.Log.Info("defragmenting etcd's database: this member serves nothing until it is done",
		"why", why, "db", mib(r.status.DbSize), "in_use", mib(r.status.DbSizeInUse))
	if _, err := k.Client.Defragment(ctx, ""); err != nil {
		return err
	}
	after, err := k.Client.Status(ctx, "")
	if err != nil {
		return fmt.Errorf("etcd's status after defragmenting: %w", err)
	}
	k.Log.Info("defragmented etcd's database", "took", time.Since(start).Round(time.Millisecond),
		"db_before", mib(r.status.DbSize), "db_after", mib(after.DbSize), "in_use", mib(after.DbSizeInUse))
	k.reported.Defragmented = time.Now()
	if req, err := k.Client.Get(ctx, keyspace.DefragRequest); err == nil && len(req.Kvs) > 0 {
		k.reported.Request = req.Kvs[0].ModRevision
	}
	return nil
}

// transferee is a voter other than the member, the first by name.
func (k *Keeper) transferee(r round) uint64 {
	var to *pb.Member
	for _, m := range r.members {
		if m.ID != k.ID && !m.IsLearner && m.Name != "" && (to == nil || m.Name < to.Name) {
			to = m
		}
	}
	if to == nil {
		return 0
	}
	return to.ID
}

// report writes the member's SpaceReport when it changed, or a minute
// after the last, and nothing while an alarm is raised: the write would
// be refused, a raft entry all the same.
func (k *Keeper) report(ctx context.Context, r round) {
	if r.any() {
		return
	}
	rep := k.reported
	rep.DB, rep.InUse, rep.Quota = r.status.DbSize, r.status.DbSizeInUse, k.Budget.Quota
	rep.Volume, rep.Free, rep.Alarm = r.size, r.free, r.mine(k.ID)
	rep.At = time.Now()
	if same(rep, k.reported) && rep.At.Sub(k.reported.At) < reportEvery {
		return
	}
	b, err := json.Marshal(rep)
	if err != nil {
		return
	}
	if _, err := k.Client.Put(ctx, keyspace.SpaceReports+k.Name, string(b)); err != nil {
		if !errors.Is(rpctypes.Error(err), rpctypes.ErrNoSpace) {
			k.Log.Warn("writing the space report", "err", err)
		}
		return
	}
	k.reported = rep
}

// same says whether two reports say the same, to a MiB.
func same(a, b keyspace.SpaceReport) bool {
	return a.DB/MiB == b.DB/MiB && a.InUse/MiB == b.InUse/MiB && a.Free/MiB == b.Free/MiB &&
		a.Quota == b.Quota && a.Alarm == b.Alarm && a.Request == b.Request && a.Defragmented.Equal(b.Defragmented)
}

// restoreReport reads the member's last report, for the owner's request
// it last answered.
func (k *Keeper) restoreReport(ctx context.Context) {
	resp, err := k.Client.Get(ctx, keyspace.SpaceReports+k.Name)
	if err != nil || len(resp.Kvs) == 0 {
		return
	}
	var rep keyspace.SpaceReport
	if json.Unmarshal(resp.Kvs[0].Value, &rep) == nil {
		k.reported = rep
	}
}

// mib is n bytes, in MiB, for the log.
func mib(n int64) string { return fmt.Sprintf("%.1fMiB", float64(n)/float64(MiB)) }
