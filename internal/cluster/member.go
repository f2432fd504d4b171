package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/borough-os/borough/internal/atomicfile"
	"github.com/borough-os/borough/internal/clusterkey"
	"github.com/borough-os/borough/internal/consensus"
	"github.com/borough-os/borough/internal/enrolment"
	"github.com/borough-os/borough/internal/join"
	"github.com/borough-os/borough/internal/keyspace"
	"github.com/borough-os/borough/internal/lifecycle"
	"github.com/borough-os/borough/internal/nodestate"
	"github.com/borough-os/borough/internal/ports"
	"github.com/borough-os/borough/internal/supervisor"
)

// Member is the node's running member of its cluster, as the way in
// (Manager) hands it back: the etcd member it started and the
// long-running services around it, each a named service under a
// supervisor (serve). It restarts etcd in place when the cluster grows
// past one voter, the owner hands the cluster over (owner.go) or
// publishes an applications CA (applications.go), or asks to recover
// from it (recover.go).
type Member struct {
	*local
	rec *nodestate.Record
	// trustMu orders the writes of what the client port trusts: an owner
	// hand-over and the owner's applications CA.
	trustMu sync.Mutex
	// client is the member's client, guarded by clientMu: etcd's restarts
	// replace it.
	clientMu sync.Mutex
	client   *clientv3.Client
	// serving is the member's etcd while its services run.
	serving atomic.Pointer[consensus.Consensus]
}

// newMember is the member the way in started, c its etcd.
func newMember(l *local, c *consensus.Consensus, rec *nodestate.Record) *Member {
	m := &Member{local: l, rec: rec}
	m.started(rec, c.Client)
	return m
}

// Run runs the member, c its etcd, until ctx ends. A member that stops
// is fatal (the node reboots into Restarting), unless the cluster
// removed it: the node is then Failed for good.
func (m *Member) Run(ctx context.Context, c *consensus.Consensus) error {
	err := m.serveRestarting(ctx, c)
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(err, consensus.ErrRemoved):
		return m.removed(m.rec)
	}
	return supervisor.Fatal(fmt.Errorf("the cluster member stopped: %w", err))
}

// serveRestarting serves the member, and starts it again with the cluster's
// raft timing when it was started alone and the cluster grows past one
// voter (consensus.ErrRetime), or to trust a new owner (errHandedOver) or
// the owner's applications (errApplications).
func (m *Member) serveRestarting(ctx context.Context, c *consensus.Consensus) error {
	for {
		err := m.serve(ctx, c)
		switch {
		case ctx.Err() != nil:
			return err
		case errors.Is(err, consensus.ErrRetime):
			m.log.Info("the cluster is growing past one voter: restarting etcd with the cluster's raft timing")
			m.retimed.Store(true)
		case errors.Is(err, errHandedOver), errors.Is(err, errApplications), errors.Is(err, errRecovering):
		default:
			return err
		}
		if c, err = m.startMember(ctx, m.rec); err != nil {
			return err
		}
		m.started(m.rec, c.Client)
	}
}

// serve runs the member and the services around it, each a named
// service under a supervisor that restarts a failed one with backoff,
// until the member ends (consensus.ErrRetime, ErrRemoved, a failure), a
// peer says the node was removed, or ctx ends. It returns only once every
// service has returned: a member restarted with the cluster's timing
// starts its services after the old ones have stopped, so that two
// escrow loops never write the ESP at once.
func (m *Member) serve(ctx context.Context, c *consensus.Consensus) error {
	rec := m.rec
	m.serving.Store(c)
	defer m.serving.Store(nil)
	js := &join.Server{Client: c.Client, PKI: m.pkiFiles(), Log: m.log.With("service", "join"), Now: m.cfg.overrides.ticketClock}
	if m.cfg.overrides.listenOnIP {
		js.Addr = net.JoinHostPort(m.cfg.IP.String(), strconv.Itoa(ports.Join))
	}
	services := []supervisor.Service{
		{Name: "etcd", Run: func(ctx context.Context) error { return ends(ctx, c.Run(ctx)) }},
		{Name: "join-endpoint", Run: js.Run},
		{Name: "removal-watch", Run: func(ctx context.Context) error { return ends(ctx, m.watchRemoval(ctx, c, rec.Node)) }},
		{Name: "promotion-report", Run: func(ctx context.Context) error { m.reportPromotion(ctx, c); return nil }},
		{Name: "member-directory", Run: func(ctx context.Context) error { m.keepDirectory(ctx, c, rec.Cluster); return nil }},
		{Name: "ca-key-copy", Run: func(ctx context.Context) error { return m.keepCAKey(ctx, c) }},
		{Name: "owner-succession", Run: func(ctx context.Context) error { return m.followOwner(ctx, c, rec) }},
		{Name: "applications-ca", Run: func(ctx context.Context) error { return m.trustApplications(ctx, c, rec) }},
		{Name: "ticket-spend", Run: func(context.Context) error { m.spendTicket(); return nil }},
		{Name: "recovery", Run: func(ctx context.Context) error { return ends(ctx, m.awaitRecover(ctx)) }},
	}
	if k := m.cfg.Keys; k != nil {
		km := clusterkey.Member{Consensus: c, PKI: m.pkiFiles(), Cluster: rec.Cluster, Node: rec.Node,
			OwnerRecovery: m.cfg.Enrolment.OwnerRecovery}
		services = append(services, supervisor.Service{Name: "unlock-escrow", Run: func(ctx context.Context) error { return k.Maintain(ctx, km) }})
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
	err := supervisor.Run(ctx, m.log, supervisor.Options{}, services...)
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
func (m *Member) spendTicket() {
	done, err := enrolment.Spend(m.cfg.Enrolment, m.cfg.ESPRoot, m.cfg.DataRoot)
	if err != nil {
		m.log.Warn("erasing the spent ticket's secret", "err", err)
	}
	if len(done) > 0 {
		m.log.Info("erased the spent ticket's secret", "from", done)
	}
}

// started records the node's names and its member's client for Healthy.
func (m *Member) started(rec *nodestate.Record, c *clientv3.Client) {
	m.life.Named(rec.Cluster, rec.Node)
	m.clientMu.Lock()
	defer m.clientMu.Unlock()
	m.client = c
}

// Client is the running member's etcd client, nil until it runs: what
// the test build's rogue-member hook (node/rogue.go) acts through, as a
// member compromised while running would.
func (m *Member) Client() *clientv3.Client {
	m.clientMu.Lock()
	defer m.clientMu.Unlock()
	return m.client
}

// Healthy checks that the node runs and its member reads through the
// cluster: a linearizable read, which takes a quorum. It is what an
// update's try boot waits for before it confirms itself.
func (m *Member) Healthy(ctx context.Context) error {
	state := m.life.Status().State
	c := m.Client()
	if state != lifecycle.Running || c == nil {
		return fmt.Errorf("the node is %s, not Running", state)
	}
	if _, err := c.Get(ctx, keyspace.Cluster); err != nil {
		return fmt.Errorf("a linearizable read: %w", err)
	}
	return nil
}

// reportPromotion logs when a learner becomes a voter; a learner
// removed is no learner either, and no voter.
func (m *Member) reportPromotion(ctx context.Context, c *consensus.Consensus) {
	if !c.IsLearner() || m.learnerForGood() {
		return
	}
	for c.IsLearner() {
		select {
		case <-ctx.Done():
			return
		case <-time.After(500 * time.Millisecond):
		}
	}
	if !c.Removed() {
		m.log.Info("promoted to voter")
	}
}

// keepCAKey keeps a copy of the cluster CA's key on the data volume, once
// etcd can be read: a node that joined learns it only then.
func (m *Member) keepCAKey(ctx context.Context, c *consensus.Consensus) error {
	path := m.pkiFiles().CAKey()
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	return retry(ctx, m.log, "keeping a copy of the cluster CA key", noneFinal, func() error {
		resp, err := c.Client.Get(ctx, keyspace.CAKey, clientv3.WithSerializable())
		if err != nil {
			return err
		}
		if len(resp.Kvs) != 1 {
			return errors.New("etcd has no CA key yet")
		}
		return atomicfile.Write(path, resp.Kvs[0].Value, 0o600)
	})
}

// hasLeader says whether the member's etcd, while its services run, has a
// leader: its cluster has its quorum.
func (m *Member) hasLeader() bool {
	c := m.serving.Load()
	return c != nil && c.HasLeader()
}
