package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/borough-os/borough/internal/admin"
	"github.com/borough-os/borough/internal/keyspace"
)

func defragCommand() *cobra.Command {
	var fingerprint string
	var wait time.Duration
	c := &cobra.Command{
		Use:   "defrag NODE",
		Short: "Have every member of NODE's (HOST:PORT) cluster defragment its database now, one at a time",
		Long: `defrag asks each member to defragment etcd's database now, as it does by
itself once a quarter of its database is free: one member at a time, the
leader last (it hands its leadership over first), never during a rollout.
A member serves nothing while bbolt copies its database. defrag waits
until every member has done it (--wait) and prints each one's database
afterwards; a member that is down does it when it is back.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return defrag(cmd.OutOrStdout(), args[0], fingerprint, wait)
		},
	}
	c.Flags().StringVar(&fingerprint, "fingerprint", "", "the cluster CA's fingerprint; needed on first use")
	c.Flags().DurationVar(&wait, "wait", 10*time.Minute, "how long to wait for every member")
	return c
}

func defrag(stdout io.Writer, node, fingerprint string, wait time.Duration) error {
	return asOwnerFor(node, fingerprint, wait, func(ctx context.Context, c *clientv3.Client) error {
		rev, err := admin.RequestDefrag(ctx, c)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "asked every member to defragment (request at revision %d)\n", rev)
		return admin.AwaitDefrag(ctx, c, rev, func(name string, r keyspace.SpaceReport) {
			fmt.Fprintf(stdout, "%s: database %s, %s in use, quota %s; %s free on its volume\n",
				name, mib(r.DB), mib(r.InUse), mib(r.Quota), mib(r.Free))
		})
	})
}
