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

	"github.com/borough-os/borough/datavol"
	"github.com/borough-os/borough/internal/clusterkey"
	"github.com/borough-os/borough/internal/consensus"
	"github.com/borough-os/borough/internal/enrolment"
	"github.com/borough-os/borough/internal/espledger"
	"github.com/borough-os/borough/internal/join"
	"github.com/borough-os/borough/internal/lifecycle"
	"github.com/borough-os/borough/internal/nodestate"
	"github.com/borough-os/borough/internal/pki"
	"github.com/borough-os/borough/internal/ports"
	"github.com/borough-os/borough/internal/supervisor"
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
}

// Steps of a join, for Config.Pause.
const (
	JoinRecorded = "join-recorded"
	JoinAdmitted = "join-admitted"
	JoinStarted  = "join-started"
)

func (mg *Manager) pause(step string) {
	if mg.cfg.Pause != nil {
		mg.cfg.Pause(step)
	}
}

func (mg *Manager) mark(phase string) {
	if mg.cfg.Timeline != nil {
		mg.cfg.Timeline.Mark(phase)
	}
}

// Manager is the cluster manager: it brings the node into its cluster
// once the data volume is mounted, and moves the node's lifecycle from
// then on. It exists from the mount on: before it, the node API answers
// for it (node/phase.go).
type Manager struct {
	log  *slog.Logger
	cfg  Config
	life *lifecycle.Lifecycle
	// trustMu orders the writes of what the client port trusts: an owner
	// hand-over and the owner's applications CA.
	trustMu sync.Mutex
	// client is the member's client once it runs, guarded by clientMu.
	clientMu sync.Mutex
	client   *clientv3.Client
	// retimed says that Run has restarted the member with the cluster's
	// raft timing (consensus.ErrRetime); only Run's goroutine uses it.
	retimed bool
	// backups hands the owner's backup to a restore waiting for it,
	// encrypted to transfer, the key the node made for that wait (nil
	// while none waits); receiving is held while one arrives (restore.go).
	backups   chan received
	transfer  atomic.Pointer[age.X25519Identity]
	receiving sync.Mutex
	// serving is the member while its services run; recoverNow wakes a
	// member that starts, or runs, for the owner's recovery (recover.go).
	serving    atomic.Pointer[consensus.Consensus]
	recoverNow chan struct{}
	// recovering orders a recovery's request and the start it forces.
	recovering sync.Mutex
}

// New returns the manager of a node whose storage and network are up, as
// cfg says, on its way into its cluster as life says (New, unless
// bring-up failed it). log is the node's root logger.
func New(log *slog.Logger, cfg Config, life *lifecycle.Lifecycle) *Manager {
	return &Manager{log: log, cfg: cfg, life: life, backups: make(chan received), recoverNow: make(chan struct{}, 1)}
}

func (mg *Manager) etcdDir() string { return datavol.Etcd.In(mg.cfg.DataRoot) }
func (mg *Manager) pkiFiles() consensus.Files {
	return consensus.Files{Dir: datavol.PKI.In(mg.cfg.DataRoot)}
}

// Run brings the node into its cluster and runs the member and its join
// endpoint until ctx ends. A failure on the way puts the node in Failed,
// with the reason logged, and Run returns nil: a failed node stays up and
// says why, it does not loop. A member that stops after Running is fatal
// (the node reboots into Restarting), unless the cluster removed it.
func (mg *Manager) Run(ctx context.Context) error {
	c, rec, err := mg.start(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		mg.life.Fail(err)
		return nil
	}
	mg.started(rec, c.Client)
	mg.mark(timeline.EtcdReady)
	role, err := mg.awaitRole(ctx, c)
	if err != nil {
		c.Close()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		mg.life.Fail(err)
		return nil
	}
	mg.life.To(lifecycle.Running)
	mg.log.Info("node running", "cluster", rec.Cluster, "member", rec.Node,
		"client", net.JoinHostPort(mg.cfg.IP.String(), strconv.Itoa(ports.Client)), "role", role)
	mg.mark(timeline.Running)
	if tl := mg.cfg.Timeline; tl != nil {
		mg.log.Info("boot timeline (seconds since the kernel started, +since the previous): " + tl.String())
	}
	err = mg.serveRestarting(ctx, c, rec)
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(err, consensus.ErrRemoved):
		return mg.removed(rec)
	}
	return supervisor.Fatal(fmt.Errorf("the cluster member stopped: %w", err))
}

// serveRestarting serves the member, and starts it again with the cluster's
// raft timing when it was started alone and the cluster grows past one
// voter (consensus.ErrRetime), or to trust a new owner (errHandedOver) or
// the owner's applications (errApplications).
func (mg *Manager) serveRestarting(ctx context.Context, c *consensus.Consensus, rec *nodestate.Record) error {
	for {
		err := mg.serve(ctx, c, rec)
		switch {
		case ctx.Err() != nil:
			return err
		case errors.Is(err, consensus.ErrRetime):
			mg.log.Info("the cluster is growing past one voter: restarting etcd with the cluster's raft timing")
			mg.retimed = true
		case errors.Is(err, errHandedOver), errors.Is(err, errApplications), errors.Is(err, errRecovering):
		default:
			return err
		}
		if c, err = mg.startMember(ctx, rec); err != nil {
			return err
		}
		mg.started(rec, c.Client)
	}
}

// serve runs the member and the services around it, each a named
// service under a supervisor that restarts a failed one with backoff,
// until the member ends (consensus.ErrRetime, ErrRemoved, a failure), a
// peer says the node was removed, or ctx ends. It returns only once every
// service has returned: a member restarted with the cluster's timing
// starts its services after the old ones have stopped, so that two
// escrow loops never write the ESP at once.
func (mg *Manager) serve(ctx context.Context, c *consensus.Consensus, rec *nodestate.Record) error {
	mg.serving.Store(c)
	defer mg.serving.Store(nil)
	js := &join.Server{Client: c.Client, PKI: mg.pkiFiles(), Log: mg.log.With("service", "join")}
	if mg.cfg.overrides.listenOnIP {
		js.Addr = net.JoinHostPort(mg.cfg.IP.String(), strconv.Itoa(ports.Join))
	}
	services := []supervisor.Service{
		{Name: "etcd", Run: func(ctx context.Context) error { return ends(ctx, c.Run(ctx)) }},
		{Name: "join-endpoint", Run: js.Run},
		{Name: "removal-watch", Run: func(ctx context.Context) error { return ends(ctx, mg.watchRemoval(ctx, c, rec.Node)) }},
		{Name: "promotion-report", Run: func(ctx context.Context) error { mg.reportPromotion(ctx, c); return nil }},
		{Name: "member-directory", Run: func(ctx context.Context) error { mg.keepDirectory(ctx, c, rec.Cluster); return nil }},
		{Name: "ca-key-copy", Run: func(ctx context.Context) error { return mg.keepCAKey(ctx, c) }},
		{Name: "owner-succession", Run: func(ctx context.Context) error { return mg.followOwner(ctx, c, rec) }},
		{Name: "applications-ca", Run: func(ctx context.Context) error { return mg.trustApplications(ctx, c, rec) }},
		{Name: "ticket-spend", Run: func(context.Context) error { mg.spendTicket(); return nil }},
		{Name: "recovery", Run: func(ctx context.Context) error { return ends(ctx, mg.awaitRecover(ctx)) }},
	}
	if k := mg.cfg.Keys; k != nil {
		m := clusterkey.Member{Consensus: c, PKI: mg.pkiFiles(), Cluster: rec.Cluster, Node: rec.Node}
		services = append(services, supervisor.Service{Name: "unlock-escrow", Run: func(ctx context.Context) error { return k.Maintain(ctx, m) }})
	}
	var running sync.WaitGroup
	for i := range services {
		run := services[i].Run
		services[i].Run = func(ctx context.Context) error {
			running.Add(1)
			defer running.Done()
			return run(ctx)
		}
	}
	err := supervisor.Run(ctx, mg.log, supervisor.Options{}, services...)
	running.Wait()
	return err
}

// ends is the result of a service whose end ends the member's services:
// nil once ctx has ended, else err, fatal to the supervisor.
func ends(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	if err == nil {
		err = errors.New("stopped")
	}
	return supervisor.Fatal(err)
}

// spendTicket erases the secret of the ticket the node enrolled with, now
// that it is a member and nothing needs it (enrolment.Spend), beside the
// member's other services rather than before them; a failure only leaves
// it where it was, and is said. Once spent, it only reads.
func (mg *Manager) spendTicket() {
	done, err := enrolment.Spend(mg.cfg.Enrolment, mg.cfg.ESPRoot, mg.cfg.DataRoot)
	if err != nil {
		mg.log.Warn("erasing the spent ticket's secret", "err", err)
	}
	if len(done) > 0 {
		mg.log.Info("erased the spent ticket's secret", "from", done)
	}
}

// removed records that the cluster removed the node and fails it for
// good.
func (mg *Manager) removed(rec *nodestate.Record) error {
	mg.life.Fail(mg.recordRemoval(rec))
	return nil
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

func (mg *Manager) consensusConfig(name, cluster string, mode consensus.Mode) consensus.Config {
	c := consensus.Config{
		Name: name, Cluster: cluster,
		DataDir: mg.etcdDir(), PKI: mg.pkiFiles(), Volume: mg.cfg.DataRoot,
		IP: mg.cfg.IP, Mode: mode,
		Alone: mg.alone(name, mode),
		Log:   mg.log.With("service", "consensus"),
	}
	if mg.cfg.overrides.listenOnIP {
		c.ListenIP = mg.cfg.IP
	}
	c.Snapshots = mg.cfg.overrides.snapshots
	c.VolumeSize = mg.cfg.VolumeSize
	return c
}

// alone says whether the member name starts in mode as its cluster's only
// member (consensus.Config.Alone): a new cluster's, or one the member
// directory lists alone, unless it has already been restarted with the
// cluster's timing (consensus.ErrRetime).
func (mg *Manager) alone(name string, mode consensus.Mode) bool {
	switch {
	case mg.retimed:
		return false
	case mode == consensus.ModeNew:
		return true
	case mode != consensus.ModeRestart:
		return false
	}
	d, err := mg.readDirectory()
	if err != nil {
		return false
	}
	_, self := d.Members[name]
	return self && len(d.Members) == 1
}

func (mg *Manager) ips() []net.IP {
	return []net.IP{mg.cfg.IP.AsSlice(), net.IPv4(127, 0, 0, 1), net.IPv6loopback}
}

// caFingerprint reads the CA file's fingerprint, for the log.
func (mg *Manager) caFingerprint() string {
	ca, err := mg.pkiFiles().LoadCA()
	if err != nil {
		return "unknown"
	}
	return pki.Fingerprint(ca)
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
