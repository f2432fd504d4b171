package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/borough-os/borough/internal/lifecycle"
	"github.com/borough-os/borough/internal/nodeapi"
	"github.com/borough-os/borough/internal/poll"
	"github.com/borough-os/borough/proto/nodepb"
)

// removedWait bounds the wait for a removed member to say it was removed.
const removedWait = time.Minute

func nodeResetCommand() *cobra.Command {
	var f apiFlags
	var endpoint string
	var force bool
	c := &cobra.Command{
		Use:   "reset NODE",
		Short: "Take the node whose API is at NODE (HOST:PORT) out of its cluster, erase it, and bring it back to its first boot",
		Long: `reset removes the node from its cluster first (given --cluster, a member's
client port: as 'borough node remove', revoking its certificates), refusing
to remove the cluster's last voter without --force. The node then erases
itself at a reboot: its data volume's header (no key, yours included,
opens the old volume again), its keys, escrow, certificates, records and
enrolment on the ESP, and every seal of its TPM (the TPM's epoch moves on).
It comes back to its first boot, waiting for an enrolment config like a
node fresh from its image. --force resets a node still in its cluster.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return resetNode(cmd.OutOrStdout(), args[0], f, endpoint, force)
		},
	}
	f.add(c)
	c.Flags().StringVar(&endpoint, "cluster", "", "a member's client port (HOST:PORT), to remove the node from its cluster first")
	c.Flags().BoolVar(&force, "force", false, "reset a node still in its cluster, or its last voter")
	return c
}

// resetNode resets the node whose API is at node, removing it from its
// cluster through endpoint first if it is a member.
func resetNode(stdout io.Writer, node string, f apiFlags, endpoint string, force bool) error {
	c, err := apiClient(node, f)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*removedWait)
	defer cancel()
	info, err := c.Info(ctx)
	if err != nil {
		return err
	}
	switch lifecycle.State(info.GetState()) {
	case lifecycle.Running, lifecycle.Restarting, lifecycle.Joining:
		switch {
		case endpoint != "":
			if err := leave(ctx, stdout, c, endpoint, info.GetMember(), f.fingerprint, force); err != nil {
				return err
			}
		case !force:
			return fmt.Errorf("%s is member %s of cluster %s: give --cluster HOST:PORT (a member's client port) to remove it first, or --force",
				node, info.GetMember(), info.GetCluster())
		}
	}
	if err := c.Reset(ctx, force); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s erases itself at the reboot it is starting, and comes back to its first boot: "+
		"give it an enrolment config (borough enrolment join, in its fw_cfg or on its ESP)\n", node)
	return nil
}

// leave removes member name from its cluster through endpoint, unless it
// is the last voter and not force, and waits until the node c calls says
// it was removed.
func leave(ctx context.Context, stdout io.Writer, c *nodeapi.Client, endpoint, name, fingerprint string, force bool) error {
	err := asOwner(endpoint, fingerprint, func(ctx context.Context, cl *clientv3.Client) error {
		list, err := cl.MemberList(ctx)
		if err != nil {
			return err
		}
		voters, voter := 0, false
		for _, m := range list.Members {
			if !m.IsLearner {
				voters++
				voter = voter || m.Name == name
			}
		}
		if voter && voters == 1 && !force {
			return fmt.Errorf("%s is the last voter of its cluster: removing it ends the cluster; --force resets it all the same", name)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := removeNode(stdout, endpoint, name, fingerprint); err != nil {
		return err
	}
	var info *nodepb.Info
	err = poll.Until(ctx, removedWait, time.Second, func() error {
		var err error
		info, err = c.Info(ctx)
		if err == nil && lifecycle.State(info.GetState()) != lifecycle.Failed {
			err = fmt.Errorf("it is %s", info.GetState())
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("%s does not say it was removed after its removal: %w", name, err)
	}
	fmt.Fprintf(stdout, "%s left its cluster: %s\n", name, info.GetFailure())
	return nil
}
