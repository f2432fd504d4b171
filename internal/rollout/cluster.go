package rollout

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/borough-os/borough/internal/keyspace"
	"github.com/borough-os/borough/internal/nodeapi"
	"github.com/borough-os/borough/internal/poll"
)

// running is the state a node API reports for a node that serves its
// cluster (lifecycle.Running, which the owner's side does not import).
const running = "Running"

// minVoters is the smallest cluster that keeps quorum while one voter is
// out: two of three.
const minVoters = 3

// probeTimeout bounds one look at the cluster; statusTimeout the question
// to one endpoint, which may be the member that reboots.
const (
	probeTimeout  = 15 * time.Second
	statusTimeout = 3 * time.Second
)

// Member is a member of the cluster as one look at it saw it.
type Member struct {
	Name            string
	Learner, Leader bool
	// Version is what the member's node API says it runs.
	Version string
	API     *nodeapi.Client
}

// Cluster rolls an update out to the members of the cluster Etcd talks
// to, one at a time.
type Cluster struct {
	// Etcd is a client of the cluster as its owner. Give it more than one
	// endpoint: the member it talks to reboots too.
	Etcd *clientv3.Client
	// API returns the client of a member's node API, from its name and
	// etcd client URLs.
	API func(name string, clientURLs []string) (*nodeapi.Client, error)
	Out io.Writer
	// Wait bounds each member's update; Settle each wait for the cluster
	// to be whole again.
	Wait, Settle time.Duration
}

// full says a rollout goes on unmarked: a full cluster takes no writes,
// and may need the update most.
const full = "the cluster is full (etcd's space alarm): members may defragment during this rollout"

// markTTL is the lease of the rollout's mark: a rollout cut off (the
// owner's tool killed) lets members defragment again within it.
const markTTL = 60

// Run updates every member that does not run up.Version, one at a time,
// each only once the whole cluster runs. While it runs, a mark in etcd
// (keyspace.Rollout) tells members not to defragment: a member that
// defragments stops serving, and one rebooting for its update is enough.
func (c *Cluster) Run(ctx context.Context, up Update) error {
	unmark, err := c.mark(ctx)
	if err != nil {
		return err
	}
	defer unmark()
	start := time.Now()
	for n := 0; ; n++ {
		ms, err := c.awaitWhole(ctx)
		if err != nil {
			return err
		}
		next, ok, err := Next(ms, up.Version)
		if err != nil {
			return err
		}
		if !ok {
			fmt.Fprintf(c.Out, "all %d members run %s; %d updated in %v\n", len(ms), up.Version, n, time.Since(start).Round(time.Second))
			return nil
		}
		role := "follower"
		switch {
		case next.Leader:
			role = "leader"
		case next.Learner:
			role = "learner"
		}
		fmt.Fprintf(c.Out, "updating %s (%s, %s -> %s); %d of %d members still to update\n",
			next.Name, role, next.Version, up.Version, pending(ms, up.Version), len(ms))
		if err := Node(ctx, c.Out, next.API, up, c.Wait); err != nil {
			return fmt.Errorf("%s: %w; the rollout stopped with every other member as it was", next.Name, err)
		}
	}
}

// mark puts the rollout's mark on a lease kept alive until the returned
// function revokes it.
func (c *Cluster) mark(ctx context.Context) (func(), error) {
	lease, err := c.Etcd.Grant(ctx, markTTL)
	if errors.Is(err, rpctypes.ErrNoSpace) {
		fmt.Fprintln(c.Out, full)
		return func() {}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("a lease for the rollout's mark: %w", err)
	}
	keep, cancel := context.WithCancel(ctx)
	if _, err := c.Etcd.KeepAlive(keep, lease.ID); err != nil {
		cancel()
		return nil, fmt.Errorf("keeping the rollout's lease: %w", err)
	}
	unmark := func() {
		cancel()
		revoke, done := context.WithTimeout(context.WithoutCancel(ctx), statusTimeout)
		defer done()
		// A mark not revoked goes with its lease, within markTTL.
		_, _ = c.Etcd.Revoke(revoke, lease.ID)
	}
	_, err = c.Etcd.Put(ctx, keyspace.Rollout, time.Now().UTC().Format(time.RFC3339), clientv3.WithLease(lease.ID))
	if errors.Is(err, rpctypes.ErrNoSpace) {
		fmt.Fprintln(c.Out, full)
		return unmark, nil
	}
	if err != nil {
		unmark()
		return nil, fmt.Errorf("marking the rollout in etcd (%s): %w", keyspace.Rollout, err)
	}
	return unmark, nil
}

// Next is the member to update next: a learner first, the leader last,
// and none while the cluster has too few voters to lose one. ok is false
// when every member runs version.
func Next(ms []Member, version string) (next Member, ok bool, err error) {
	var todo []Member
	voters := 0
	for _, m := range ms {
		if !m.Learner {
			voters++
		}
		if m.Version != version {
			todo = append(todo, m)
		}
	}
	if len(todo) == 0 {
		return Member{}, false, nil
	}
	if voters < minVoters {
		return Member{}, false, fmt.Errorf("the cluster has %d voters: it loses quorum while any of them reboots, so it is not updated as a cluster (update each node with `borough update NODE IMAGE`, accepting the outage)", voters)
	}
	rank := func(m Member) int {
		switch {
		case m.Learner:
			return 0
		case m.Leader:
			return 2
		}
		return 1
	}
	return slices.MinFunc(todo, func(a, b Member) int {
		return cmp.Or(cmp.Compare(rank(a), rank(b)), strings.Compare(a.Name, b.Name))
	}), true, nil
}

func pending(ms []Member, version string) int {
	n := 0
	for _, m := range ms {
		if m.Version != version {
			n++
		}
	}
	return n
}

// awaitWhole looks at the cluster until it is whole, at most Settle, and
// returns its members. It says why it waits when the reason changes, and
// every repeatEvery while it does not.
func (c *Cluster) awaitWhole(ctx context.Context) ([]Member, error) {
	var last reason
	var said time.Time
	var ms []Member
	var lookErr error
	err := poll.Until(ctx, c.Settle, pollEvery, func() error {
		var why reason
		ms, why, lookErr = c.look(ctx)
		switch {
		case lookErr != nil:
			return poll.Stop(lookErr)
		case why == (reason{}):
			return nil
		}
		if why.who != last.who || time.Since(said) > repeatEvery {
			fmt.Fprintf(c.Out, "waiting: %s\n", why)
			last, said = why, time.Now()
		}
		return errors.New(why.String())
	})
	switch {
	case lookErr != nil:
		return nil, lookErr
	case err != nil:
		return nil, fmt.Errorf("the cluster was not whole: %w", err)
	}
	return ms, nil
}

// repeatEvery is how often awaitWhole repeats a reason to wait.
const repeatEvery = 30 * time.Second

// reason is why the cluster is not whole: who (a member, or etcd) and
// what is wrong, which changes with every try of a connection.
type reason struct{ who, what string }

func (r reason) String() string { return r.who + ": " + r.what }

// look looks at the cluster once. It is whole (no reason) when etcd has a
// leader and answers a linearizable read, and every member has started
// and runs; err is for what waiting does not mend, such as a node API
// address at which another machine answers.
func (c *Cluster) look(ctx context.Context) (ms []Member, why reason, err error) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	list, err := c.Etcd.MemberList(ctx)
	if err != nil {
		return nil, reason{"etcd", fmt.Sprintf("member list: %v", err)}, nil
	}
	leader, err := c.leader(ctx)
	if err != nil {
		return nil, reason{"etcd", err.Error()}, nil
	}
	if _, err := c.Etcd.Get(ctx, "borough/rollout", clientv3.WithCountOnly()); err != nil {
		return nil, reason{"etcd", fmt.Sprintf("no linearizable read: %v", err)}, nil
	}
	for _, m := range list.Members {
		if m.Name == "" {
			return nil, reason{fmt.Sprintf("member %x", m.ID), "not started"}, nil
		}
		api, err := c.API(m.Name, m.ClientURLs)
		if err != nil {
			return nil, reason{}, fmt.Errorf("member %s: %w", m.Name, err)
		}
		info, err := api.Info(ctx)
		if errors.As(err, new(*tls.CertificateVerificationError)) {
			return nil, reason{}, fmt.Errorf("member %s: %w", m.Name, err)
		}
		if err != nil {
			return nil, reason{m.Name, err.Error()}, nil
		}
		if info.GetState() != running {
			return nil, reason{m.Name, info.GetState()}, nil
		}
		ms = append(ms, Member{Name: m.Name, Learner: m.IsLearner, Leader: m.ID == leader,
			Version: info.GetVersion(), API: api})
	}
	return ms, reason{}, nil
}

// leader asks the endpoints in turn which member leads.
func (c *Cluster) leader(ctx context.Context) (uint64, error) {
	var errs []error
	for _, ep := range c.Etcd.Endpoints() {
		ctx, cancel := context.WithTimeout(ctx, statusTimeout)
		st, err := c.Etcd.Status(ctx, ep)
		cancel()
		if err == nil && st.Leader != 0 {
			return st.Leader, nil
		}
		if err == nil {
			err = fmt.Errorf("%s knows no leader", ep)
		}
		errs = append(errs, err)
	}
	return 0, fmt.Errorf("no endpoint names a leader: %w", errors.Join(errs...))
}
