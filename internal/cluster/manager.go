package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"filippo.io/age"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/borough-os/borough/internal/clusterkey"
	"github.com/borough-os/borough/internal/consensus"
	"github.com/borough-os/borough/internal/enrolment"
	"github.com/borough-os/borough/internal/espledger"
	"github.com/borough-os/borough/internal/lifecycle"
	"github.com/borough-os/borough/internal/nodestate"
	"github.com/borough-os/borough/internal/ports"
	"github.com/borough-os/borough/internal/timeline"
)

// Config is what the manager needs to bring the node into its cluster.
type Config struct {
	Enrolment *enrolment.Enrolment
	// FreshData says the data volume was created on this boot.
	FreshData bool
	// IP is the node's advertised address.
	IP netip.Addr
	// ESPRoot and DataRoot are where the ESP and data volume are mounted.
	ESPRoot, DataRoot string
	// Ledger reads and writes the ESP's copies of the node state record
	// and the member directory (package espledger): a copy it refuses
	// counts as damaged, and the data volume's decides.
	Ledger *espledger.Ledger
	// Pause, if set, is called after each step of a join (JoinRecorded,
	// JoinAdmitted, JoinStarted), for crash tests.
	Pause func(step string)
	// Keys, if set, keeps the node's cluster unlock key with the cluster
	// while the member runs.
	Keys *clusterkey.Keeper
	// Timeline, if set, gets the boot's last marks (etcd ready, running)
	// and is logged once the node runs.
	Timeline *timeline.Timeline
	// VolumeSize, if set, stands for the data volume's size in etcd's
	// space budget (consensus.Config.VolumeSize): a test build's
	// borough.test.volume, for a quota a boot test fills quickly.
	VolumeSize int64
	// overrides are test seams.
	overrides overrides
}

// overrides let several members run in one test process.
type overrides struct {
	// listenOnIP makes etcd and the join endpoint listen on IP only.
	listenOnIP bool
	// snapshots is consensus.Config.Snapshots.
	snapshots uint64
	// ticketClock is the clock the join endpoint checks tickets against
	// (join.Server.Now).
	ticketClock func() time.Time
}

// Steps of a join, for Config.Pause.
const (
	JoinRecorded = "join-recorded"
	JoinAdmitted = "join-admitted"
	JoinStarted  = "join-started"
)

// Manager is the node's way into its cluster: once the data volume is
// mounted it bootstraps a new cluster (bootstrap.go), restores one from
// the owner's backup (restore.go), joins a running one with a ticket
// (join.go), or restarts into the one the node belongs to (restart.go),
// moving the node's lifecycle as it goes; then it hands back the running
// Member, which owns everything long-running. It exists from the mount
// on: before it, the node API answers for it (node/phase.go).
type Manager struct {
	*local
	// backups hands the owner's backup to a restore waiting for it,
	// encrypted to transfer, the key the node made for that wait (nil
	// while none waits); receiving is held while one arrives (restore.go).
	backups   chan received
	transfer  atomic.Pointer[age.X25519Identity]
	receiving sync.Mutex
	// running is the member once the way in has handed it back.
	running atomic.Pointer[Member]
}

// New returns the manager of a node whose storage and network are up, as
// cfg says, on its way into its cluster as life says (New, unless
// bring-up failed it). log is the node's root logger.
func New(log *slog.Logger, cfg Config, life *lifecycle.Lifecycle) *Manager {
	return &Manager{local: &local{log: log, cfg: cfg, life: life, recoverNow: make(chan struct{}, 1)}, backups: make(chan received)}
}

// Run brings the node into its cluster, then runs the member until ctx
// ends. A failure on the way in puts the node in Failed, with the reason
// logged, and Run returns nil: a failed node stays up and says why, it
// does not loop. Once Running, the member's end is Member.Run's.
func (mg *Manager) Run(ctx context.Context) error {
	c, rec, err := mg.start(ctx)
	if err != nil {
		return mg.failed(ctx, err)
	}
	m := newMember(mg.local, c, rec)
	mg.running.Store(m)
	mg.mark(timeline.EtcdReady)
	role, err := mg.awaitRole(ctx, c)
	if err != nil {
		c.Close()
		return mg.failed(ctx, err)
	}
	mg.life.To(lifecycle.Running)
	mg.log.Info("node running", "cluster", rec.Cluster, "member", rec.Node,
		"client", net.JoinHostPort(mg.cfg.IP.String(), strconv.Itoa(ports.Client)), "role", role)
	mg.mark(timeline.Running)
	if tl := mg.cfg.Timeline; tl != nil {
		mg.log.Info("boot timeline (seconds since the kernel started, +since the previous): " + tl.String())
	}
	return m.Run(ctx, c)
}

// failed fails the node with err, the way in's failure, unless ctx ended.
func (mg *Manager) failed(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	mg.life.Fail(err)
	return nil
}

// Client is the running member's etcd client, nil until it runs: what
// the test build's rogue-member hook (node/rogue.go) acts through, as a
// member compromised while running would.
func (mg *Manager) Client() *clientv3.Client {
	if m := mg.running.Load(); m != nil {
		return m.Client()
	}
	return nil
}

// Healthy checks that the node runs and its member reads through the
// cluster (Member.Healthy). It is what an update's try boot waits for
// before it confirms itself.
func (mg *Manager) Healthy(ctx context.Context) error {
	m := mg.running.Load()
	if m == nil {
		return fmt.Errorf("the node is %s, not Running", mg.life.Status().State)
	}
	return m.Healthy(ctx)
}

func (mg *Manager) start(ctx context.Context) (*consensus.Consensus, *nodestate.Record, error) {
	espRec, err := mg.readESPRecord()
	espDamaged := errors.Is(err, nodestate.ErrDamaged)
	switch {
	case espDamaged:
		mg.log.Warn("the node state record on the ESP is damaged; the data volume's record decides", "err", err)
	case err != nil:
		return nil, nil, err
	}
	dataRec, err := nodestate.ReadRecord(mg.dataRecord())
	if err != nil {
		return nil, nil, err
	}
	d := decide(espRec, dataRec, espDamaged, mg.cfg.FreshData, mg.cfg.Enrolment.Ticket != nil)
	if d.Next == lifecycle.Failed {
		return nil, nil, d.Reason
	}
	mg.life.To(d.Next)
	switch d.Next {
	case lifecycle.Restarting:
		c, err := mg.restart(ctx, d.Record)
		return c, d.Record, err
	case lifecycle.Joining:
		return mg.join(ctx, d.Record)
	}
	return mg.bootstrap(ctx, d.Record)
}

// noneFinal is retry's final for errors that are all worth retrying.
func noneFinal(error) bool { return false }

// retry runs fn until it succeeds, fails for good (final says which), or
// ctx ends, waiting longer after each failure and logging it.
func retry(ctx context.Context, log *slog.Logger, what string, final func(error) bool, fn func() error) error {
	wait := time.Second
	for {
		err := fn()
		if err == nil || final(err) {
			return err
		}
		log.Warn(what+"; retrying", "err", err, "in", wait)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, 30*time.Second)
	}
}

func newName() string {
	b := make([]byte, 4)
	rand.Read(b)
	return "node-" + hex.EncodeToString(b)
}
