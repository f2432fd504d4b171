package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/borough-os/borough/internal/admin"
	"github.com/borough-os/borough/internal/atomicfile"
	"github.com/borough-os/borough/internal/pki"
	"github.com/borough-os/borough/internal/poll"
)

// The next owner's identity while a rotation is under way: made and kept
// before the cluster is told of it, so that a rotation cut short never
// leaves a cluster whose owner's key is lost; a rotation run again takes
// it up.
func nextKeyPath() string  { return ownerKeyPath() + ".next" }
func nextCertPath() string { return ownerCertPath() + ".next" }

func ownerRotateCommand() *cobra.Command {
	var name, fingerprint string
	var wait time.Duration
	c := &cobra.Command{
		Use:   "rotate NODE",
		Short: "Hand NODE's (HOST:PORT) cluster over to a new owner key, signed by the current one",
		Long: `rotate makes a new owner key and certificate and hands the cluster over to
them: the current owner signs the hand-over, which every node takes from
etcd and checks against the owner it trusts, and the new owner signs
again each node's admission and the revocations. Each member then
restarts etcd in turn (10 s apart, keeping the quorum) to trust the new
owner on its client port; the node API trusts it at once. The old key is
kept in the config directory (owner-key.age.replaced-...) and opens
nothing on the cluster after the hand-over; disks reseal their owner
escrow to the new owner within a round. Tickets the old owner minted and
nobody used are void: mint new ones.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return ownerRotate(cmd.OutOrStdout(), args[0], fingerprint, name, wait)
		},
	}
	c.Flags().StringVar(&name, "name", "owner", "the new owner's name, in its certificate (etcd names the owner by it)")
	c.Flags().StringVar(&fingerprint, "fingerprint", "", "the cluster CA's fingerprint; needed on first use")
	c.Flags().DurationVar(&wait, "wait", 3*time.Minute, "how long to wait for NODE to trust the new owner on its client port (0: do not wait)")
	return c
}

func ownerRotate(stdout io.Writer, node, fingerprint, name string, wait time.Duration) error {
	if err := checkOwnerName(name); err != nil {
		return err
	}
	owner, err := ownerKeyPair()
	if err != nil {
		return err
	}
	next, err := nextOwner(stdout, name)
	if err != nil {
		return err
	}
	var h admin.HandOverResult
	err = asOwner(node, fingerprint, func(ctx context.Context, c *clientv3.Client) error {
		return rememberCRL(node, func(remembered []byte) ([]byte, error) {
			h, err = admin.HandOver(ctx, c, owner, next, remembered)
			return h.CRL, err
		})
	})
	if err != nil {
		return fmt.Errorf("handing the cluster over (the next owner's identity stays in %s for a second try): %w", nextCertPath(), err)
	}
	if err := takeNextOwner(stdout, next); err != nil {
		return err
	}
	printHandOver(stdout, h, next.Leaf)
	if wait == 0 {
		return nil
	}
	return awaitOwner(stdout, node, wait)
}

// nextOwner is the next owner's identity: the one a rotation cut short
// left, or a new one, kept (encrypted) before the cluster hears of it.
func nextOwner(stdout io.Writer, name string) (tls.Certificate, error) {
	if _, err := os.Stat(nextCertPath()); err == nil {
		fmt.Fprintf(stdout, "taking up the rotation to %s begun before\n", nextCertPath())
		return loadPair(nextCertPath(), nextKeyPath())
	}
	id, sealed, err := newOwner(name)
	if err != nil {
		return tls.Certificate{}, err
	}
	err = atomicfile.WriteAll(
		atomicfile.File{Path: nextKeyPath(), Data: sealed, Perm: 0o600},
		atomicfile.File{Path: nextCertPath(), Data: pki.CertPEM(id.Cert), Perm: 0o644},
	)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("keeping the next owner's identity: %w", err)
	}
	return id.TLS(), nil
}

// loadPair reads an owner certificate and its encrypted key.
func loadPair(certPath, keyPath string) (tls.Certificate, error) {
	certPEM, err := os.ReadFile(certPath)
	if err != nil {
		return tls.Certificate{}, err
	}
	keyPEM, err := readOwnerKey(keyPath)
	if err != nil {
		return tls.Certificate{}, err
	}
	kp, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return kp, fmt.Errorf("the owner identity %s: %w", certPath, err)
	}
	return kp, nil
}

// takeNextOwner makes the next owner's identity the config directory's,
// keeping the old one aside.
func takeNextOwner(stdout io.Writer, next tls.Certificate) error {
	if err := backUpOwner(stdout); err != nil {
		return err
	}
	for _, p := range [][2]string{{nextKeyPath(), ownerKeyPath()}, {nextCertPath(), ownerCertPath()}} {
		if err := os.Rename(p[0], p[1]); err != nil {
			return fmt.Errorf("taking the next owner's identity: %w", err)
		}
	}
	unlocked[configDir] = next
	return nil
}

func printHandOver(stdout io.Writer, h admin.HandOverResult, next *x509.Certificate) {
	fmt.Fprintf(stdout, "handed the cluster over to owner %q (%s), hand-over %d\n", next.Subject.CommonName, pki.Fingerprint(next), h.Number)
	fmt.Fprintf(stdout, "admissions signed again for: %s\n", strings.Join(h.Admitted, ", "))
	for _, a := range h.NotAdmitted {
		fmt.Fprintf(stdout, "no admission for %s (%s): borough cluster admit gives it one\n", a.Node, a.Why)
	}
	if h.CRL != nil {
		fmt.Fprintln(stdout, "the revocations signed again by the new owner")
	}
	fmt.Fprintln(stdout, "tickets the old owner minted and nobody used are void")
}

// awaitOwner waits until node's client port takes the owner the config
// directory now holds, saying so every 10 s.
func awaitOwner(stdout io.Writer, node string, wait time.Duration) error {
	said := time.Now()
	err := poll.Until(context.Background(), wait, 2*time.Second, func() error {
		err := asOwner(node, "", func(ctx context.Context, c *clientv3.Client) error {
			ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			_, err := c.Status(ctx, node)
			return err
		})
		if err != nil && time.Since(said) > 10*time.Second {
			fmt.Fprintf(stdout, "waiting for %s to restart etcd and take the new owner...\n", node)
			said = time.Now()
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("%s did not take the new owner on its client port (its console says why): %w", node, err)
	}
	fmt.Fprintf(stdout, "%s takes the new owner on its client port\n", node)
	return nil
}
