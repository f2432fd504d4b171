package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/borough-os/borough/internal/admin"
)

// recoverWait bounds the wait for a recovered member to serve alone.
const recoverWait = 3 * time.Minute

func clusterRecoverCommand() *cobra.Command {
	var f apiFlags
	var endpoint string
	c := &cobra.Command{
		Use:   "recover NODE",
		Short: "Make the node whose API is at NODE (HOST:PORT) its cluster's only member, with its data, once most of the cluster is lost for good",
		Long: `recover is for a cluster that lost most of its voters for good: the
survivors' etcd waits for a quorum that will not come. The node (unlocked
first, if it waits for its key: borough node unlock) records the request on
its data volume and restarts etcd as its cluster's only member with the
data it has (etcd's --force-new-cluster), once: a power cut before it runs
forces it again at the next boot. A member that has a leader is refused:
its cluster has its quorum, and forcing it alone would split the cluster.
Then, through --cluster (the node's client port), recover removes and
revokes every node the cluster's records still count in that is no longer
a member. Join new nodes with tickets; the unlock escrow splits again as
voters come. Writes the lost members acknowledged that never reached this
node are gone with them.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return recoverCluster(cmd.OutOrStdout(), args[0], f, endpoint)
		},
	}
	f.add(c)
	c.Flags().StringVar(&endpoint, "cluster", "", "the node's client port (HOST:PORT), to remove the lost members through")
	return c
}

// recoverCluster asks the node whose API is at node to become its cluster's
// only member, waits until it serves alone through endpoint, and removes
// the lost nodes.
func recoverCluster(stdout io.Writer, node string, f apiFlags, endpoint string) error {
	if endpoint == "" {
		return errors.New("--cluster HOST:PORT is required: the node's client port, to remove the lost members through")
	}
	c, err := apiClient(node, f)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), recoverWait)
	defer cancel()
	if err := c.Recover(ctx); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s restarts etcd as its cluster's only member, with its data\n", c.Addr)
	info, err := awaitRunning(ctx, c, "recovering")
	if err != nil {
		return err
	}
	lost, err := lostNodes(ctx, stdout, endpoint, f.fingerprint)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s serves alone; removing the %d nodes lost: %v\n", info.GetMember(), len(lost), lost)
	for _, name := range lost {
		if err := removeNode(stdout, endpoint, name, f.fingerprint); err != nil {
			return err
		}
	}
	fmt.Fprintf(stdout, "cluster %s runs on %s alone: join new nodes with tickets (borough cluster ticket)\n",
		info.GetCluster(), info.GetMember())
	return nil
}

// lostNodes waits until the member at endpoint serves alone and returns
// the nodes lost: its etcd restarts, and a member that ran before the
// recovery closes its client port a moment. Each try may take what is
// left of ctx's time, no more.
func lostNodes(ctx context.Context, stdout io.Writer, endpoint, fingerprint string) ([]string, error) {
	deadline, _ := ctx.Deadline()
	for {
		var lost []string
		err := asOwnerFor(endpoint, fingerprint, time.Until(deadline), func(ctx context.Context, cl *clientv3.Client) error {
			if err := awaitAlone(ctx, cl); err != nil {
				return err
			}
			var err error
			lost, err = admin.LostNodes(ctx, cl)
			return err
		})
		if err == nil {
			return lost, nil
		}
		fmt.Fprintf(stdout, "waiting for %s to serve alone: %v\n", endpoint, err)
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(pollEvery):
		}
	}
}

// awaitAlone waits until the member cl reaches counts itself its
// cluster's only member, as etcd's linearizable member list says.
func awaitAlone(ctx context.Context, cl *clientv3.Client) error {
	for {
		list, err := cl.MemberList(ctx)
		if err == nil && len(list.Members) == 1 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the member does not serve alone: %w", errors.Join(err, ctx.Err()))
		case <-time.After(time.Second):
		}
	}
}
