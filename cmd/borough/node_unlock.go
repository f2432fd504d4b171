package main

import (
	"context"
	"crypto/ecdsa"
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/borough-os/borough/internal/escrow"
	"github.com/borough-os/borough/internal/nodeapi"
	"github.com/borough-os/borough/internal/pki"
)

func nodeUnlockCommand() *cobra.Command {
	var f apiFlags
	c := &cobra.Command{
		Use:   "unlock NODE",
		Short: "Unlock the data volume of the node whose API is at NODE (HOST:PORT), which waits for peers that are gone",
		Long: `unlock is for a node whose cluster lost most of its voters for good: the
holders of its unlock key are gone, and it waits for them. The node gives
its unlock keys sealed to the owner (as on its ESP); unlock opens them with
the owner key, checks that the node that answers has the key the record
was sealed for (another machine with a copy of the node's disk, or a
member that holds the cluster CA posing under the node's name, gets
nothing), and sends the cluster unlock key sealed to a key the node made
for this wait. The node checks it against its record and opens its data
volume; its etcd then waits for a quorum, or for 'borough cluster recover'.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := apiClient(args[0], f)
			if err != nil {
				return err
			}
			key, err := ownerECDSAKey()
			if err != nil {
				return err
			}
			return unlockNode(context.Background(), cmd.OutOrStdout(), c, key)
		},
	}
	f.add(c)
	return c
}

// unlockNode sends the node c calls its cluster unlock key, opened with
// owner from the node's record, once the node's key is the record's.
func unlockNode(ctx context.Context, stdout io.Writer, c *nodeapi.Client, owner *ecdsa.PrivateKey) error {
	locked, peer, err := c.Locked(ctx)
	if err != nil {
		return err
	}
	var r escrow.OwnerRecovery
	if err := json.Unmarshal(locked.GetOwnerRecovery(), &r); err != nil {
		return fmt.Errorf("the node's unlock keys sealed to its owner: %w", err)
	}
	if name := peer.Subject.CommonName; name != r.Node || !r.Binds(pki.KeyHash(peer)) {
		return fmt.Errorf("refusing to unlock the node at %s: it presents a certificate of %q with key sha256:%x, "+
			"and its record is of %s, sealed for key sha256:%x: another machine with a copy of %s's disk, "+
			"or a member posing under its name", c.Addr, name, pki.KeyHash(peer), r.Node, r.NodeKey, r.Node)
	}
	_, cuk, err := r.Open(owner)
	if err != nil {
		return err
	}
	defer clear(cuk)
	sealed, err := escrow.SealOwnerUnlock(locked.GetKey(), &r, cuk)
	if err != nil {
		return err
	}
	if err := c.Unlock(ctx, sealed); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "sent %s of cluster %s its cluster unlock key: it opens its data volume\n", r.Node, r.Cluster)
	return nil
}
