package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	"github.com/borough-os/borough/internal/admin"
	"github.com/borough-os/borough/internal/atomicfile"
	"github.com/borough-os/borough/internal/pki"
	"github.com/borough-os/borough/internal/ticket"
	"github.com/borough-os/borough/proto/enrolmentpb"
)

type ticketFlags struct {
	fingerprint, out, policy string
	ttl                      time.Duration
	learner                  bool
}

func clusterCommand() *cobra.Command {
	c := &cobra.Command{Use: "cluster", Short: "Grow a cluster, and back it up"}
	var f ticketFlags
	t := &cobra.Command{
		Use:   "ticket NODE",
		Short: "Mint a one-time join ticket as the owner of NODE's (HOST:PORT) cluster",
		Long: `ticket asks the cluster, as its owner, to admit one more node: it writes a
ticket (--out) that names the cluster, pins its CA and lists the members'
join endpoints, with a random secret that never leaves the node that
joins with it: the node claims the ticket for its own key with a key
derived from the secret, and the cluster keeps only that key's public
half and your signature. The ticket admits one node, once, until it
expires (--ttl). Give it to 'borough enrolment join'.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return mintTicket(cmd.OutOrStdout(), args[0], f)
		},
	}
	t.Flags().StringVar(&f.fingerprint, "fingerprint", "", "the cluster CA's fingerprint; needed on first use")
	t.Flags().StringVar(&f.out, "out", "ticket.pb", "file to write")
	t.Flags().DurationVar(&f.ttl, "ttl", ticket.DefaultTTL, "how long the ticket admits a node")
	t.Flags().BoolVar(&f.learner, "learner", false, "the node stays a learner: it holds the data but never votes")
	t.Flags().StringVar(&f.policy, "storage-policy", "", "the joining node's TPM use: best-effort, required or disabled")
	c.AddCommand(t, admitCommand(), backupCommand(), verifyBackupCommand(), clusterRecoverCommand(), credentialCommand(), defragCommand())
	return c
}

func admitCommand() *cobra.Command {
	var fingerprint string
	var yes bool
	c := &cobra.Command{
		Use:   "admit NODE",
		Short: "Admit, as the owner, the nodes of NODE's (HOST:PORT) cluster that joined before admissions",
		Long: `admit signs your admission of each node of the cluster that has none: the
nodes that joined before Borough checked admissions. It admits the key
each node signed its published escrow key with, as the cluster holds it
now, so run it right after the update that brought admissions. It shows
each node and the certificate whose key it would admit, and asks before it
signs (--yes does not ask). Until a node is admitted its peers seal it no
unlock shares, and 'borough node' and 'borough update' refuse it
(--unverified reaches one node).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return admitNodes(cmd.InOrStdin(), cmd.OutOrStdout(), args[0], fingerprint, yes)
		},
	}
	c.Flags().StringVar(&fingerprint, "fingerprint", "", "the cluster CA's fingerprint; needed on first use")
	c.Flags().BoolVar(&yes, "yes", false, "admit what it shows without asking")
	return c
}

// admitNodes shows the nodes of node's cluster without an admission and
// admits them once the owner agrees (on stdin, or yes).
func admitNodes(stdin io.Reader, stdout io.Writer, node, fingerprint string, yes bool) error {
	owner, err := ownerKeyPair()
	if err != nil {
		return err
	}
	var done []admin.Admitted
	err = asOwner(node, fingerprint, func(ctx context.Context, c *clientv3.Client) error {
		nodes, err := admin.ListUnadmitted(ctx, c)
		if err != nil {
			return err
		}
		if !showUnadmitted(stdout, nodes) {
			return nil
		}
		if !yes && !agree(stdin, stdout, "admit these keys as yours? [y/N] ") {
			return errors.New("nothing admitted")
		}
		done, err = admin.AdmitNodes(ctx, c, owner, nodes)
		return err
	})
	if err != nil {
		return fmt.Errorf("%s: %w", node, err)
	}
	failed := 0
	for _, a := range done {
		if a.Key == "" {
			failed++
			fmt.Fprintf(stdout, "not admitted %s: %s\n", a.Node, a.Why)
			continue
		}
		fmt.Fprintf(stdout, "admitted %s: the key of its certificate %s\n", a.Node, a.Key)
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d nodes without an admission not admitted", failed, len(done))
	}
	fmt.Fprintf(stdout, "every node of the cluster is admitted (%d now)\n", len(done))
	return nil
}

// showUnadmitted prints what admit would do for nodes, and says whether
// there is a key to admit.
func showUnadmitted(stdout io.Writer, nodes []admin.Unadmitted) bool {
	some := false
	for _, n := range nodes {
		if n.Cert == nil {
			fmt.Fprintf(stdout, "%s: cannot be admitted: %s\n", n.Node, n.Why)
			continue
		}
		some = true
		fmt.Fprintf(stdout, "%s: would admit the key of its certificate %s (serial %x, issued %s)\n",
			n.Node, pki.Fingerprint(n.Cert), n.Cert.SerialNumber, n.Cert.NotBefore.UTC().Format(time.RFC3339))
	}
	if len(nodes) == 0 {
		fmt.Fprintln(stdout, "every node of the cluster is admitted")
	}
	return some
}

// agree asks question on stdout and says whether stdin answered yes.
func agree(stdin io.Reader, stdout io.Writer, question string) bool {
	fmt.Fprint(stdout, question)
	answer, _ := bufio.NewReader(stdin).ReadString('\n')
	switch strings.ToLower(strings.TrimSpace(answer)) {
	case "y", "yes":
		return true
	}
	return false
}

func mintTicket(stdout io.Writer, node string, f ticketFlags) error {
	p := admin.TicketParams{TTL: f.ttl, Learner: f.learner}
	if f.policy != "" {
		var ok bool
		if p.StoragePolicy, ok = policies[f.policy]; !ok {
			return fmt.Errorf("--storage-policy %q: want best-effort, required or disabled", f.policy)
		}
	}
	var t *enrolmentpb.Ticket
	err := asOwner(node, f.fingerprint, func(ctx context.Context, c *clientv3.Client) error {
		owner, err := ownerKeyPair()
		if err != nil {
			return err
		}
		t, err = admin.MintTicket(ctx, c, p, owner)
		return err
	})
	if err != nil {
		return fmt.Errorf("%s: %w", node, err)
	}
	b, err := proto.Marshal(t)
	if err != nil {
		return err
	}
	if err := os.WriteFile(f.out, b, 0o600); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s: joins cluster %s until %s, through %v\n", f.out, t.GetClusterName(),
		time.Unix(t.GetExpires(), 0).Format(time.RFC3339), t.GetJoinEndpoints())
	return nil
}

func nodeCommand() *cobra.Command {
	c := &cobra.Command{Use: "node", Short: "Manage a cluster's nodes, and see and power one through its node API"}
	var fingerprint string
	rm := &cobra.Command{
		Use:   "remove NODE MEMBER",
		Short: "Remove node MEMBER from NODE's (HOST:PORT) cluster and revoke its certificate",
		Long: `remove takes MEMBER out of etcd's membership and adds its certificate to the
cluster's revocation list, which every member puts in force on its peer and
client ports within seconds. A removed node that boots again stays down
and says so. Removing is for good: the machine needs a new ticket (and a
fresh disk) to join again.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return removeNode(cmd.OutOrStdout(), args[0], args[1], fingerprint)
		},
	}
	rm.Flags().StringVar(&fingerprint, "fingerprint", "", "the cluster CA's fingerprint; needed on first use")
	c.AddCommand(rm, nodeRestoreCommand(), nodeResetCommand(), nodeUnlockCommand(), nodeNetworkCommand(), nodeEnrolCommand())
	c.AddCommand(nodeAPICommands()...)
	return c
}

func removeNode(stdout io.Writer, node, name, fingerprint string) error {
	var r admin.Removal
	err := asOwner(node, fingerprint, func(ctx context.Context, c *clientv3.Client) error {
		owner, err := ownerKeyPair()
		if err != nil {
			return err
		}
		return rememberCRL(node, func(remembered []byte) ([]byte, error) {
			r, err = admin.RemoveNode(ctx, c, name, owner, remembered)
			return r.CRL, err
		})
	})
	if len(r.Serials) > 0 {
		fmt.Fprintf(stdout, "revoked the certificates of %s (serials %s)\n", name, strings.Join(r.Serials, ", "))
	}
	if err != nil {
		return err
	}
	if r.MemberID == 0 {
		fmt.Fprintf(stdout, "%s was no longer an etcd member\n", name)
		return nil
	}
	fmt.Fprintf(stdout, "removed member %s (%x)\n", name, r.MemberID)
	return nil
}

// rememberCRL runs revoke with the last CRL the owner's tool made for
// node's cluster (nil if none), and keeps the CRL revoke makes, if any,
// as the last.
func rememberCRL(node string, revoke func(remembered []byte) ([]byte, error)) error {
	path, err := crlPath(node)
	if err != nil {
		return err
	}
	remembered, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	crl, err := revoke(remembered)
	if err != nil || crl == nil {
		return err
	}
	return atomicfile.Write(path, crl, 0o644)
}

// crlPath is where the owner's tool keeps the last CRL it made for the
// cluster of node's pinned CA: the owner's own record of whom it revoked,
// which the next removal builds on when a member has rewritten etcd's.
func crlPath(node string) (string, error) {
	ca, err := pki.ReadCertPEM(caPath(node))
	if err != nil {
		return "", err
	}
	return filepath.Join(configDir, "revocations", strings.TrimPrefix(pki.Fingerprint(ca), "sha256:")+".der"), nil
}
