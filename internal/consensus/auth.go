package consensus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/borough-os/borough/internal/keyspace"
)

// etcd authentication is on in every Borough cluster, so that Borough's
// keys (keyspace, under /borough/) are not an application's: etcd's users
// are the node's own (nodeUser, which only the node's in-process client
// presents: localclient.go) and the owner, named by the common name of the
// owner certificate the client port requires, both with etcd's root role;
// an application credential the owner mints gets a role over its own keys
// and nothing under /borough/. The leader turns authentication on once,
// for a new cluster and for one that ran without it.

// authInterval is how often the leader looks whether authentication is on
// until it is.
const authInterval = time.Second

// keepAuth turns etcd authentication on, on the leader, once; then it
// waits for ctx to end.
func (c *Consensus) keepAuth(ctx context.Context) error {
	for {
		if c.etcd.Server.Leader() == c.etcd.Server.MemberID() {
			err := c.enableAuth(ctx)
			if err == nil {
				<-ctx.Done()
				return ctx.Err()
			}
			c.cfg.Log.Warn("turning etcd authentication on", "err", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(authInterval):
		}
	}
}

// enableAuth turns authentication on, if it is not, with the node's user
// and the owner's as root.
func (c *Consensus) enableAuth(ctx context.Context) error {
	st, err := c.Client.AuthStatus(ctx)
	if err != nil {
		return fmt.Errorf("reading whether it is on: %w", err)
	}
	if st.Enabled {
		return nil
	}
	users := []string{nodeUser}
	owner, err := c.cfg.PKI.LoadOwner()
	if err != nil {
		return err
	}
	if owner != nil {
		if owner.Subject.CommonName == "" {
			return errors.New("the owner certificate has no common name, which etcd would name the owner by")
		}
		if owner.Subject.CommonName != nodeUser {
			users = append(users, owner.Subject.CommonName)
		}
	}
	for _, u := range users {
		if err := keyspace.RootUser(ctx, c.Client, u); err != nil {
			return err
		}
	}
	if _, err := c.Client.AuthEnable(ctx); err != nil {
		return fmt.Errorf("enabling it: %w", err)
	}
	c.cfg.Log.Info("etcd authentication on", "root", users)
	return nil
}
