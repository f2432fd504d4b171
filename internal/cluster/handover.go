package cluster

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/borough-os/borough/internal/atomicfile"
	"github.com/borough-os/borough/internal/authority"
	"github.com/borough-os/borough/internal/clusterkey"
	"github.com/borough-os/borough/internal/consensus"
	"github.com/borough-os/borough/internal/keyspace"
	"github.com/borough-os/borough/internal/nodestate"
	"github.com/borough-os/borough/internal/pki"
	"github.com/borough-os/borough/internal/supervisor"
)

// errHandedOver ends the member's services once the node took an owner
// hand-over: etcd reads the certificate its client port trusts only when
// it starts, so it starts again (serveRestarting).
var errHandedOver = errors.New("the cluster was handed over to a new owner: etcd restarts to trust them on its client port")

// handOverStagger is how long each member waits after the one before it
// in name order to restart etcd after a hand-over, so that the members do
// not all restart at once and the cluster keeps its quorum.
const handOverStagger = 10 * time.Second

// followOwner takes the owner's hand-overs of the cluster as the owner's
// tool publishes them (keyspace.Successions; `borough owner rotate`):
// each one the node's owner signed makes the next owner the node's, in
// its PKI files, with the admission the next owner signed for the node's
// key, and etcd restarts in the node's turn to trust them. A hand-over
// any member could have made (not signed by the node's owner, or
// numbered no higher than the last it took) is passed over, saying why.
func (m *Member) followOwner(ctx context.Context, c *consensus.Consensus, rec *nodestate.Record) error {
	return m.retrust(ctx, c, rec, trustChange{
		what: "the new owner", why: errHandedOver, key: keyspace.Successions, prefix: true,
		take: func(ctx context.Context) (bool, error) { return m.takeHandOvers(ctx, c, rec) },
	})
}

// trustChange is a change of what a member's client port trusts, which
// the owner publishes under key in etcd, and take takes.
type trustChange struct {
	what string
	why  error
	key  string
	// prefix says that key is a prefix.
	prefix bool
	// take takes what etcd holds, if it is the owner's word, and says
	// whether the client port's trust changed.
	take func(context.Context) (bool, error)
}

// retrust takes ch as etcd has it and at each change of it, in a cluster
// with an owner, until the client port's trust changes; then etcd
// restarts, in the node's turn.
func (m *Member) retrust(ctx context.Context, c *consensus.Consensus, rec *nodestate.Record, ch trustChange) error {
	if owner, err := m.pkiFiles().LoadOwner(); owner == nil || err != nil {
		<-ctx.Done()
		return err
	}
	var opts []clientv3.OpOption
	if ch.prefix {
		opts = append(opts, clientv3.WithPrefix())
	}
	watch := c.Client.Watch(clientv3.WithRequireLeader(ctx), ch.key, opts...)
	for {
		changed, err := ch.take(ctx)
		if err != nil {
			return fmt.Errorf("taking %s: %w", ch.what, err)
		}
		if changed {
			return m.restartInTurn(ctx, c, rec.Node, ch.what, ch.why)
		}
		select {
		case <-ctx.Done():
			return nil
		case resp, ok := <-watch:
			if ctx.Err() != nil {
				return nil
			}
			if !ok || resp.Err() != nil {
				return fmt.Errorf("watching %s: %v", ch.key, resp.Err())
			}
		}
	}
}

// takeHandOvers takes the hand-overs etcd holds that follow from the
// node's owner, and says whether it took any.
func (m *Member) takeHandOvers(ctx context.Context, c *consensus.Consensus, rec *nodestate.Record) (bool, error) {
	f := m.pkiFiles()
	owner, err := f.LoadOwner()
	if err != nil {
		return false, err
	}
	after, err := f.TakenSuccession()
	if err != nil {
		return false, err
	}
	resp, err := c.Client.Get(ctx, keyspace.Successions, clientv3.WithPrefix())
	if err != nil {
		return false, fmt.Errorf("reading them: %w", err)
	}
	var statements [][]byte
	for _, kv := range resp.Kvs {
		statements = append(statements, kv.Value)
	}
	taken, refused := authority.Succeed(statements, owner, after, rec.Cluster)
	if refused != nil {
		m.log.Warn("refused an owner hand-over", "owner", pki.Fingerprint(owner), "err", refused)
	}
	if len(taken) == 0 {
		return false, nil
	}
	last := taken[len(taken)-1]
	var more []atomicfile.File
	if admission, err := m.admissionBy(ctx, c, rec, last.Owner); err != nil {
		m.log.Warn("taking a hand-over without the node's admission by the next owner: peers seal it nothing until "+
			"the owner admits it (borough cluster admit)", "succession", last.Number, "err", err)
	} else {
		more = append(more, atomicfile.File{Path: f.Admission(), Data: admission, Perm: 0o600})
	}
	m.trustMu.Lock()
	err = f.HandOver(last, more...)
	m.trustMu.Unlock()
	if err != nil {
		return false, err
	}
	m.log.Info("the cluster has a new owner", "succession", last.Number, "from", pki.Fingerprint(owner),
		"owner", pki.Fingerprint(last.Owner), "name", last.Owner.Subject.CommonName)
	return true, nil
}

// admissionBy is the node's admission by owner, from its record in etcd,
// which the owner's tool rewrote with the hand-over.
func (m *Member) admissionBy(ctx context.Context, c *consensus.Consensus, rec *nodestate.Record, owner *x509.Certificate) ([]byte, error) {
	id, err := m.Identity()
	if err != nil {
		return nil, err
	}
	admission, err := clusterkey.RecordedAdmission(ctx, c.Client, owner, rec.Cluster, rec.Node, pki.KeyHash(id.Leaf))
	if err != nil {
		return nil, fmt.Errorf("the node's admission by the next owner: %w", err)
	}
	return admission, nil
}

// restartInTurn waits for the node's turn (its place among the members'
// names, handOverStagger apart; a learner that never started has no name
// yet), then ends the member's services with why, for etcd to start
// again and trust what on its client port.
func (m *Member) restartInTurn(ctx context.Context, c *consensus.Consensus, node, what string, why error) error {
	var names []string
	for _, m := range c.Members() {
		if m.Name != "" {
			names = append(names, m.Name)
		}
	}
	slices.Sort(names)
	turn := time.Duration(max(slices.Index(names, node), 0)) * handOverStagger
	m.log.Info("restarting etcd to trust "+what+" on its client port", "in", turn)
	select {
	case <-ctx.Done():
		return nil
	case <-time.After(turn):
	}
	return supervisor.Fatal(why)
}
