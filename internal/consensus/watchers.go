package consensus

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/borough-os/borough/internal/atomicfile"
	"github.com/borough-os/borough/internal/authority"
	"github.com/borough-os/borough/internal/keyspace"
	"github.com/borough-os/borough/internal/pki"
)

// watchCRL keeps the CRL file equal to the CRL in etcd: it reads the
// member's own copy (a serializable read, which needs no leader), then
// watches it from there. A learner watches too: the client is in process,
// where etcd's gRPC refusal of learners' watches does not apply.
func (c *Consensus) watchCRL(ctx context.Context) error {
	resp, err := c.Client.Get(ctx, keyspace.CRL, clientv3.WithSerializable())
	if err != nil {
		return fmt.Errorf("reading CRL: %w", err)
	}
	if len(resp.Kvs) == 1 {
		if err := c.writeCRL(resp.Kvs[0].Value); err != nil {
			return err
		}
	}
	next := resp.Header.Revision + 1
	for {
		err := c.watchCRLFrom(ctx, &next)
		// etcd cancels a watch whose creation raced a change of its
		// authentication store (fresh): watch again from where it was.
		if !errors.Is(err, rpctypes.ErrAuthOldRevision) {
			return err
		}
	}
}

// watchCRLFrom watches the CRL from revision *next on, moving *next past
// each event it has written.
func (c *Consensus) watchCRLFrom(ctx context.Context, next *int64) error {
	for w := range c.Client.Watch(ctx, keyspace.CRL, clientv3.WithRev(*next)) {
		if err := w.Err(); err != nil {
			return fmt.Errorf("watching CRL: %w", err)
		}
		for _, ev := range w.Events {
			if ev.Type == clientv3.EventTypePut {
				if err := c.writeCRL(ev.Kv.Value); err != nil {
					return err
				}
			}
			*next = ev.Kv.ModRevision + 1
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return errors.New("the CRL watch ended")
}

// writeCRL checks a CRL from etcd and replaces the CRL file with it,
// atomically: etcd reads it on every handshake and must never see half a
// file. A CRL the cluster CA did not sign, or not newer than the file's,
// is refused (logged, the file kept): whoever can write etcd must not be
// able to unrevoke a node or, with garbage, break every handshake. In a
// cluster with an owner, so is a CRL that does not carry the owner's
// signed revocations of its number, or revokes other than they say, or
// takes a revocation back: every member holds the CA's key, and none may
// revoke a node, or give one back its standing, on its own.
func (c *Consensus) writeCRL(der []byte) error {
	if b, err := os.ReadFile(c.cfg.PKI.CRL()); err == nil && bytes.Equal(b, der) {
		return nil
	}
	if err := c.checkCRL(der); err != nil {
		c.cfg.Log.Error("refusing the CRL in etcd; keeping the current one", "err", err)
		return nil
	}
	if err := atomicfile.Write(c.cfg.PKI.CRL(), der, 0o600); err != nil {
		return fmt.Errorf("writing CRL: %w", err)
	}
	c.cfg.Log.Info("CRL in force", "bytes", len(der))
	return nil
}

// checkCRL checks a new CRL against the CA, the current CRL file and the
// owner's revocations.
func (c *Consensus) checkCRL(der []byte) error {
	ca, err := c.cfg.PKI.LoadCA()
	if err != nil {
		return err
	}
	var current *x509.RevocationList
	if b, err := os.ReadFile(c.cfg.PKI.CRL()); err == nil {
		current, _ = x509.ParseRevocationList(b)
	}
	if err := pki.CheckCRL(der, ca, current); err != nil {
		return err
	}
	return c.checkRevocations(der, current)
}

// checkRevocations checks, in a cluster with an owner, that the CRL der
// may follow current in force (authority.Follows): it carries the owner's
// signed revocations, and takes no revocation back.
func (c *Consensus) checkRevocations(der []byte, current *x509.RevocationList) error {
	owner, err := c.cfg.PKI.LoadOwner()
	if owner == nil || err != nil {
		return err
	}
	crl, err := x509.ParseRevocationList(der)
	if err != nil {
		return err
	}
	return authority.Follows(crl, current, owner)
}

// errLearnerNotReady is etcd's refusal to promote a learner that has not
// caught up; the client package has no variable for it.
var errLearnerNotReady = rpctypes.Error(rpctypes.ErrGRPCLearnerNotReady)

// promoteInterval is how often the autopromoter looks for learners.
const promoteInterval = 250 * time.Millisecond

// promoteWait bounds each promotion's wait: raft turns a membership
// change proposed while another is pending (a join's, a removal's, a
// stalled member's, stall.go) into an empty entry, and etcd waits for the
// change itself until its context ends. The next look tries again.
const promoteWait = 10 * time.Second

// autopromote promotes learners, on the leader only, as promotable says.
// etcd refuses to promote a learner that has not caught up; that is
// logged at debug level and retried. A member started alone promotes
// none: it returns ErrRetime instead, and as soon as another member votes.
func (c *Consensus) autopromote(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(promoteInterval):
		}
		if c.cfg.Alone && voters(c.Members()) > 1 {
			return ErrRetime
		}
		if c.etcd.Server.Leader() != c.etcd.Server.MemberID() || !hasLearner(c.Members()) {
			continue
		}
		forGood, err := c.learnersForGood(ctx)
		if err != nil {
			c.cfg.Log.Warn("autopromoter: reading node records", "err", err)
			continue
		}
		m, ok := promotable(c.Members(), forGood)
		if !ok {
			continue
		}
		if c.cfg.Alone {
			return ErrRetime
		}
		promoting, cancel := context.WithTimeout(ctx, promoteWait)
		_, err = c.Client.MemberPromote(promoting, m.ID)
		cancel()
		switch {
		case err == nil, errors.Is(err, rpctypes.ErrMemberNotLearner):
			c.cfg.Log.Info("promoted learner", "member", m.Name)
		case errors.Is(err, errLearnerNotReady):
			c.cfg.Log.Debug("autopromoter: learner not caught up", "member", m.Name)
		default:
			c.cfg.Log.Warn("autopromoter: promoting learner", "member", m.Name, "err", err)
		}
	}
}

func hasLearner(members []Member) bool {
	for _, m := range members {
		if m.Learner {
			return true
		}
	}
	return false
}

// learnersForGood returns the names of nodes that joined as learners for
// good.
func (c *Consensus) learnersForGood(ctx context.Context) (map[string]bool, error) {
	resp, err := c.Client.Get(ctx, keyspace.Nodes, clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, kv := range resp.Kvs {
		var r keyspace.NodeRecord
		if json.Unmarshal(kv.Value, &r) == nil && r.Learner {
			out[strings.TrimPrefix(string(kv.Key), keyspace.Nodes)] = true
		}
	}
	return out, nil
}

// promotable picks the learner to promote next, if the policy (see the
// package doc) promotes one now: learners that have started (a name) and
// are not learners for good count as pending; one is promoted when voters
// and pending learners make at least three.
func promotable(members []Member, forGood map[string]bool) (Member, bool) {
	voters, pending := count(members, forGood)
	if len(pending) == 0 || voters+len(pending) < minVoters {
		return Member{}, false
	}
	return pending[0], true
}

// voters counts the members that vote.
func voters(members []Member) int {
	n, _ := count(members, nil)
	return n
}

// minVoters is the fewest voters the policy promotes learners to.
const minVoters = 3

// count returns the voters and the learners that would vote.
func count(members []Member, forGood map[string]bool) (voters int, pending []Member) {
	for _, m := range members {
		switch {
		case !m.Learner:
			voters++
		case m.Name != "" && !forGood[m.Name]:
			pending = append(pending, m)
		}
	}
	return voters, pending
}

// KeepsLearners says whether the policy keeps the cluster's learners as
// they are until more nodes join: a learner asks, as it cannot read which
// learners are learners for good, and counts them all as would-be voters.
func KeepsLearners(members []Member) bool {
	voters, pending := count(members, nil)
	return voters+len(pending) < minVoters
}
