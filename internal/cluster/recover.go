package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/borough-os/borough/datavol"
	"github.com/borough-os/borough/internal/atomicfile"
	"github.com/borough-os/borough/internal/consensus"
	"github.com/borough-os/borough/internal/lifecycle"
)

// Recovery from a quorum lost for good. When most of a cluster's voters
// are gone and will not come back, the survivors' etcd waits for a quorum
// for ever. The owner (borough cluster recover) then asks one survivor to
// become its cluster's only member, with its data: etcd's
// --force-new-cluster, which commits, from this member's log, the removal
// of every other member. The request is written to the data volume before
// etcd stops, and the member starts forced for as long as the request is
// not marked done: a power cut in between forces it again at the next
// boot, and a forced start of a member alone changes nothing more. It is
// done once: the record stays, and a member that was recovered is refused
// another recovery only while it has a leader, as any member is: forcing
// a member out of a cluster that has its quorum would split the cluster
// in two.

// errRecovering ends the member's start or its services so that it starts
// again forced.
var errRecovering = errors.New("the owner asked to recover the cluster from this member")

// recovery is the owner's request, on the data volume.
type recovery struct {
	Requested time.Time `json:"requested"`
	// Done is when the member first ran forced; zero until then.
	Done time.Time `json:"done,omitzero"`
}

func (l *local) recoveryFile() string {
	return datavol.Recovery.In(l.cfg.DataRoot)
}

// readRecovery returns the recorded request, nil if there is none.
func (l *local) readRecovery() (*recovery, error) {
	b, err := os.ReadFile(l.recoveryFile())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var r recovery
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", l.recoveryFile(), err)
	}
	return &r, nil
}

func (l *local) writeRecovery(r *recovery) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return atomicfile.Write(l.recoveryFile(), b, 0o600)
}

// Recover records the owner's request to make this member its cluster's
// only member and restarts it so. It refuses a node that is not a member
// with its data, and a member that has a leader.
func (mg *Manager) Recover() error {
	switch st := mg.life.Status(); {
	case st.State != lifecycle.Restarting && st.State != lifecycle.Running:
		return fmt.Errorf("the node is not a member with its data (state %s)", st.State)
	}
	if m := mg.running.Load(); m != nil && m.hasLeader() {
		return errors.New("the member has a leader: its cluster has its quorum; remove the members that are " +
			"gone with borough node remove instead (forcing this member alone would split the cluster in two)")
	}
	mg.recovering.Lock()
	defer mg.recovering.Unlock()
	r, err := mg.readRecovery()
	if err != nil {
		return err
	}
	if r == nil || !r.Done.IsZero() {
		r = &recovery{Requested: time.Now()}
	}
	if err := mg.writeRecovery(r); err != nil {
		return fmt.Errorf("recording the recovery: %w", err)
	}
	mg.log.Warn("the owner asked to recover the cluster from this member: restarting etcd as the cluster's only member, with its data")
	select {
	case mg.recoverNow <- struct{}{}:
	default:
	}
	return nil
}

// forced sets cfg to start the member forced if a recorded request is not
// yet done, and returns that request (nil if there is none).
func (l *local) forced(cfg *consensus.Config) (*recovery, error) {
	l.recovering.Lock()
	defer l.recovering.Unlock()
	r, err := l.readRecovery()
	if err != nil || r == nil || !r.Done.IsZero() {
		return nil, err
	}
	// This start is the one the request asked for: a wake-up sent with it
	// would restart the member once more.
	select {
	case <-l.recoverNow:
	default:
	}
	cfg.ForceNewCluster, cfg.Alone = true, true
	l.log.Warn("recovering: starting etcd as its cluster's only member, with its data (etcd's --force-new-cluster)")
	return r, nil
}

// recovered records r, the request a forced start that now runs answered,
// done.
func (l *local) recovered(r *recovery) error {
	r.Done = time.Now()
	if err := l.writeRecovery(r); err != nil {
		return fmt.Errorf("recording the recovery done: %w", err)
	}
	l.log.Warn("recovered: this member is its cluster's only member; remove the members that are gone " +
		"(borough cluster recover does) and join new ones with tickets")
	return nil
}

// awaitRecover ends with errRecovering when the owner asks to recover, for
// the member's services.
func (m *Member) awaitRecover(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return nil
	case <-m.recoverNow:
		return errRecovering
	}
}
