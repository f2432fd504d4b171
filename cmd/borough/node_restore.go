package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"os"
	"time"

	"filippo.io/age"
	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	"github.com/borough-os/borough/internal/admin"
	"github.com/borough-os/borough/internal/backup"
	"github.com/borough-os/borough/internal/enrolment"
	"github.com/borough-os/borough/internal/lifecycle"
	"github.com/borough-os/borough/internal/nodeapi"
	"github.com/borough-os/borough/internal/pki"
	"github.com/borough-os/borough/proto/enrolmentpb"
	"github.com/borough-os/borough/proto/nodepb"
)

// pollEvery is how often `node restore` and `cluster recover` look
// whether the node runs.
const pollEvery = 2 * time.Second

func nodeRestoreCommand() *cobra.Command {
	var config, endpoint, nodeKey string
	var timeout time.Duration
	c := &cobra.Command{
		Use:   "restore NODE BACKUP",
		Short: "Send the backup a first node waits for, to its node API at NODE (HOST:PORT), and wait until it runs",
		Long: `restore sends BACKUP (borough cluster backup) to the node whose enrolment
config (--enrolment, from 'borough enrolment bootstrap --restore BACKUP')
names it, and waits until the node runs the restored cluster. The backup
is decrypted here with your owner key and travels encrypted to a key the
node made as it waits, which it gives here. The node has no certificate
of its cluster yet:
it prints its own key on its console ("node_key=sha256:..."), and the
backup goes only to a node that presents that key (--node-key), so a
machine posing as the node gets nothing, whatever it read of the config.
The backup must be signed by your owner key (borough cluster backup signs
it): restore checks it first, and so does the node, against its config,
before it writes anything. Once the node says it runs, restore checks that
it proves so with the backed-up cluster's CA.

The restored node voids the backed-up cluster's nodes (their records say
removed, their tickets and escrow keys are gone); given --cluster, the
node's client port, restore then revokes their certificates with your
signature too, as 'borough node remove' does, so that no member takes
their word that they were removed without yours.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := sendBackup(cmd.OutOrStdout(), args[0], args[1], config, nodeKey, timeout); err != nil || endpoint == "" {
				return err
			}
			return revokeVoided(cmd.OutOrStdout(), endpoint)
		},
	}
	c.Flags().StringVar(&config, "enrolment", "", "the node's enrolment config, which names the backup (required)")
	c.Flags().StringVar(&endpoint, "cluster", "", "the restored node's client port (HOST:PORT), to revoke the old nodes through")
	c.Flags().StringVar(&nodeKey, "node-key", "", "the key the node printed on its console (sha256:...) (required)")
	c.Flags().DurationVar(&timeout, "timeout", 30*time.Minute, "how long sending and restoring may take")
	c.MarkFlagRequired("enrolment")
	c.MarkFlagRequired("node-key")
	return c
}

// sendBackup sends the backup at path, which the enrolment config at
// config names, to the node API at node, which must present nodeKey,
// resealed to the key the node waits with, and waits until the node
// runs.
func sendBackup(stdout io.Writer, node, path, config, nodeKey string, timeout time.Duration) error {
	if err := nodeapi.CheckNodeKey(nodeKey); err != nil {
		return fmt.Errorf("--node-key: %w", err)
	}
	restore, err := restoreOf(config)
	if err != nil {
		return err
	}
	checked, err := checkBackupFile(path)
	if err != nil {
		return err
	}
	if checked.SnapshotSHA256 != restore.SnapshotSHA256 {
		return fmt.Errorf("%s holds snapshot %s; --enrolment %s restores snapshot %s", path, checked.SnapshotSHA256, config, restore.SnapshotSHA256)
	}
	ca, err := pki.ParseCertPEM(checked.CA)
	if err != nil {
		return fmt.Errorf("%s: its cluster CA: %w", path, err)
	}
	key, err := ownerECDSAKey()
	if err != nil {
		return err
	}
	kp, err := ownerKeyPair()
	if err != nil {
		return err
	}
	in, err := os.Open(path)
	if err != nil {
		return err
	}
	defer in.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c := &nodeapi.Client{Addr: node, Owner: kp, NodeKey: nodeKey}
	to, err := transferRecipient(ctx, c)
	if err != nil {
		return err
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(backup.Reseal(pw, in, key, to)) }()
	start := time.Now()
	fmt.Fprintf(stdout, "sending %s to %s\n", path, node)
	resp, err := c.Restore(ctx, pr)
	pr.Close()
	if err != nil {
		return fmt.Errorf("restoring %s on %s: %w", path, node, err)
	}
	fmt.Fprintf(stdout, "%s took the backup of cluster %s (revision %d) in %.1f s; restoring it\n",
		node, resp.GetCluster(), resp.GetRevision(), time.Since(start).Seconds())
	info, err := awaitRestored(ctx, kp, node, ca)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s runs cluster %s as %s, %.1f s after the backup was sent; join others with borough cluster ticket\n",
		node, info.GetCluster(), info.GetMember(), time.Since(start).Seconds())
	return nil
}

// transferRecipient asks the node c checks, which waits for a backup, for
// the key it made to receive it.
func transferRecipient(ctx context.Context, c *nodeapi.Client) (age.Recipient, error) {
	info, err := c.Info(ctx)
	if err != nil {
		return nil, err
	}
	if info.GetRestoreRecipient() == "" {
		why := info.GetState()
		if f := info.GetFailure(); f != "" {
			why += ": " + f
		}
		return nil, fmt.Errorf("%s waits for no backup (state %s)", c.Addr, why)
	}
	to, err := age.ParseX25519Recipient(info.GetRestoreRecipient())
	if err != nil {
		return nil, fmt.Errorf("%s gives a key to send the backup to that is no age X25519 recipient: %w", c.Addr, err)
	}
	return to, nil
}

// awaitRestored waits until the node at node says it runs, and checks
// that it proves so with its certificate of the cluster CA ca: until it
// runs, it has only its own key, which changes as it restores, and it is
// sent nothing more.
func awaitRestored(ctx context.Context, owner tls.Certificate, node string, ca *x509.Certificate) (*nodepb.Info, error) {
	said, err := awaitRunning(ctx, &nodeapi.Client{Addr: node, Owner: owner, Unverified: true}, "restoring")
	if err != nil {
		return nil, err
	}
	info, err := (&nodeapi.Client{Addr: node, Owner: owner, CA: ca, ServerName: said.GetMember()}).Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("%s says it runs cluster %s as %s, but does not prove it with the backed-up cluster's CA: %w",
			node, said.GetCluster(), said.GetMember(), err)
	}
	return info, nil
}

// revokeVoided revokes, through endpoint, the certificates of the nodes a
// restore voided.
func revokeVoided(stdout io.Writer, endpoint string) error {
	var voided []string
	err := asOwner(endpoint, "", func(ctx context.Context, c *clientv3.Client) error {
		var err error
		voided, err = admin.VoidedNodes(ctx, c)
		return err
	})
	if err != nil {
		return err
	}
	for _, name := range voided {
		if err := removeNode(stdout, endpoint, name, ""); err != nil {
			return err
		}
	}
	fmt.Fprintf(stdout, "revoked the %d nodes of the backed-up cluster\n", len(voided))
	return nil
}

// restoreOf is the restore the enrolment config at path names.
func restoreOf(path string) (*enrolment.Restore, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var cfg enrolmentpb.Config
	if err := proto.Unmarshal(b, &cfg); err != nil {
		return nil, fmt.Errorf("--enrolment %s: not an enrolment config: %w", path, err)
	}
	e, err := enrolment.Check(&cfg, time.Time{})
	if err != nil {
		return nil, fmt.Errorf("--enrolment %s: %w", path, err)
	}
	if e.Restore == nil {
		return nil, fmt.Errorf("--enrolment %s names no backup to restore (make one with enrolment bootstrap --restore)", path)
	}
	if e.Spent() {
		return nil, fmt.Errorf("--enrolment %s: %w", path, enrolment.ErrSpent)
	}
	return e.Restore, nil
}

// awaitRunning waits until the node c calls runs its cluster and returns
// what it says then; doing names what it does meanwhile, for an error.
func awaitRunning(ctx context.Context, c *nodeapi.Client, doing string) (*nodepb.Info, error) {
	for {
		info, err := c.Info(ctx)
		switch {
		case err == nil && info.GetState() == string(lifecycle.Running):
			return info, nil
		case err == nil && info.GetState() == string(lifecycle.Failed):
			return nil, fmt.Errorf("%s failed %s: %s", c.Addr, doing, info.GetFailure())
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%s does not run its cluster yet, %s (last: %v): %w", c.Addr, doing, err, ctx.Err())
		case <-time.After(pollEvery):
		}
	}
}
