package consensus

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/borough-os/borough/internal/atomicfile"
)

// watchCRL keeps the CRL file equal to the CRL in etcd.
func (c *Consensus) watchCRL(ctx context.Context) error {
	resp, err := c.Client.Get(ctx, KeyCRL)
	if err != nil {
		return fmt.Errorf("reading CRL: %w", err)
	}
	if len(resp.Kvs) == 1 {
		if err := c.writeCRL(resp.Kvs[0].Value); err != nil {
			return err
		}
	}
	for w := range c.Client.Watch(ctx, KeyCRL, clientv3.WithRev(resp.Header.Revision+1)) {
		if err := w.Err(); err != nil {
			return fmt.Errorf("watching CRL: %w", err)
		}
		for _, ev := range w.Events {
			if ev.Type == clientv3.EventTypePut {
				if err := c.writeCRL(ev.Kv.Value); err != nil {
					return err
				}
				c.cfg.Log.Info("CRL updated", "bytes", len(ev.Kv.Value))
			}
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return errors.New("the CRL watch ended")
}

// writeCRL replaces the CRL file atomically: etcd reads it on every peer
// handshake and must never see half a file.
func (c *Consensus) writeCRL(der []byte) error {
	if err := atomicfile.Write(c.cfg.PKI.CRL(), der, 0o600); err != nil {
		return fmt.Errorf("writing CRL: %w", err)
	}
	return nil
}

// promoteInterval is how often the autopromoter looks for learners.
const promoteInterval = 5 * time.Second

// autopromote promotes learners. etcd refuses to promote a learner that
// has not caught up; that is logged at debug level and retried.
func (c *Consensus) autopromote(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(promoteInterval):
		}
		members, err := c.Client.MemberList(ctx)
		if err != nil {
			c.cfg.Log.Warn("autopromoter: listing members", "err", err)
			continue
		}
		for _, m := range members.Members {
			if !m.IsLearner {
				continue
			}
			if _, err := c.Client.MemberPromote(ctx, m.ID); err != nil {
				c.cfg.Log.Debug("autopromoter: learner not ready", "member", m.Name, "err", err)
				continue
			}
			c.cfg.Log.Info("promoted learner", "member", m.Name)
		}
	}
}
