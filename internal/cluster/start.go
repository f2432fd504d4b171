package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/borough-os/borough/internal/consensus"
	"github.com/borough-os/borough/internal/join"
	"github.com/borough-os/borough/internal/nodestate"
)

// Starting etcd from the member's data, which the way in does once
// (restart.go, and a join that did not finish) and the running member
// again whenever etcd must restart (member.go): a start that sees the
// node removed records it, and one the owner's recovery forces starts
// the member alone (recover.go).

// statusAfter is how long a restarting member waits for etcd before it
// asks its peers whether it is still a member.
const statusAfter = 10 * time.Second

// startMember starts etcd from its data. If etcd is not ready soon, the
// peers may be refusing the node: it asks them (package join's status)
// every few seconds, and stops once one says the cluster removed it. It
// asks them too when etcd fails to start, which it does when a peer that
// has not yet revoked the node tells it it was removed. A removal, said
// so or seen by etcd as it starts, is recorded in the node state records
// (recordRemoval), and the error says it.
func (l *local) startMember(ctx context.Context, rec *nodestate.Record) (*consensus.Consensus, error) {
	c, err := l.startOrRemoved(ctx, rec)
	for errors.Is(err, errRecovering) {
		c, err = l.startOrRemoved(ctx, rec)
	}
	if errors.Is(err, consensus.ErrRemoved) {
		return nil, l.recordRemoval(rec)
	}
	if err == nil && c.Removed() {
		c.Close()
		return nil, l.recordRemoval(rec)
	}
	return c, err
}

// startOrRemoved is startMember before it records a removal.
func (l *local) startOrRemoved(ctx context.Context, rec *nodestate.Record) (*consensus.Consensus, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		c   *consensus.Consensus
		err error
	}
	cfg := l.consensusConfig(rec.Node, rec.Cluster, consensus.ModeRestart)
	request, err := l.forced(&cfg)
	if err != nil {
		return nil, err
	}
	done := make(chan result, 1)
	go func() {
		c, err := consensus.Start(ctx, cfg)
		if err == nil && request != nil {
			if err = l.recovered(request); err != nil {
				c.Close()
				c = nil
			}
		}
		done <- result{c, err}
	}()
	wait := statusAfter
	for {
		select {
		case <-l.recoverNow:
			cancel()
			if r := <-done; r.c != nil {
				r.c.Close()
			}
			return nil, errRecovering
		case r := <-done:
			// etcd also stops when a peer tells it it was removed.
			if r.err != nil {
				if removed, err := l.askStatus(ctx, rec.Node); err == nil && removed {
					return nil, &consensus.RemovedError{Cluster: rec.Cluster}
				}
			}
			return r.c, r.err
		case <-time.After(wait):
		}
		wait = 5 * time.Second
		removed, err := l.askStatus(ctx, rec.Node)
		if err != nil {
			l.log.Info("etcd is not ready yet, and no peer says whether this node is still a member", "err", err)
			continue
		}
		if removed {
			cancel()
			if r := <-done; r.c != nil {
				r.c.Close()
			}
			return nil, &consensus.RemovedError{Cluster: rec.Cluster}
		}
		l.log.Info("etcd is not ready yet; the peers still count this node as a member")
	}
}

// askStatus asks the peers in the member directory whether the cluster
// still counts this node as a member; with an owner, a peer that says it
// does not must show the owner's word for it.
func (l *local) askStatus(ctx context.Context, self string) (bool, error) {
	endpoints, err := l.statusEndpoints(self)
	if err != nil {
		return false, err
	}
	f := l.pkiFiles()
	cert, err := f.LoadIdentity()
	if err != nil {
		return false, err
	}
	ca, err := f.LoadCA()
	if err != nil {
		return false, err
	}
	owner, err := f.LoadOwner()
	if err != nil {
		return false, err
	}
	return join.Status(ctx, endpoints, ca, owner, *cert)
}

// statusEndpoints are the join endpoints of the member directory's peers,
// or, for a node that has no directory yet because its join did not
// finish, its ticket's.
func (l *local) statusEndpoints(self string) ([]string, error) {
	d, err := l.readDirectory()
	if err == nil {
		return d.PeerEndpoints(self), nil
	}
	if t := l.cfg.Enrolment.Ticket; t != nil {
		return t.GetJoinEndpoints(), nil
	}
	return nil, fmt.Errorf("reading the member directory: %w", err)
}
