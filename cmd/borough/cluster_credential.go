package main

import (
	"context"
	"crypto/x509"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/borough-os/borough/internal/admin"
	"github.com/borough-os/borough/internal/atomicfile"
	"github.com/borough-os/borough/internal/pki"
	"github.com/borough-os/borough/internal/poll"
)

// credentialFlags are the flags of `cluster credential` and its commands.
type credentialFlags struct {
	cluster, fingerprint, out string
	p                         admin.CredentialParams
	wait                      time.Duration
}

func credentialCommand() *cobra.Command {
	var f credentialFlags
	c := &cobra.Command{
		Use:   "credential NAME --cluster ENDPOINTS --prefix PREFIX",
		Short: "Mint a credential with which an application's etcd client reaches the keys under PREFIX, and nothing else",
		Long: `credential writes NAME.pem, NAME-key.pem and ca.pem to --out: a client
certificate for etcd's client port, and the cluster CA to check the
members by, for any etcd client (etcdctl --cert --key --cacert). It is the
etcd user app:NAME, whose one role reads (--read-only) or reads and
writes the keys that begin with PREFIX; Borough's own keys (/borough/)
are out of its reach. It is signed with your owner key, as a CA for
applications that the cluster's client ports trust once they have seen it:
the first credential of a cluster (or of a new owner) restarts each
member's etcd once, in turn, ten seconds apart, and credential waits (up to
--wait) until the credential reaches every endpoint.
'credential revoke NAME' ends it at once; handing the cluster to a new
owner ends them all.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f.p.Name = args[0]
			return mintCredential(cmd.OutOrStdout(), f)
		},
	}
	c.Flags().StringVar(&f.p.Prefix, "prefix", "", "the keys the credential reaches: those that begin with it, as /app/")
	c.Flags().BoolVar(&f.p.ReadOnly, "read-only", false, "read the keys only")
	c.Flags().DurationVar(&f.p.TTL, "ttl", 365*24*time.Hour, "how long the credential is valid")
	c.Flags().StringVar(&f.out, "out", ".", "the directory to write the credential to")
	c.Flags().DurationVar(&f.wait, "wait", 2*time.Minute, "how long to wait for every endpoint to take the credential")
	revoke := &cobra.Command{
		Use:   "revoke NAME --cluster ENDPOINTS",
		Short: "End application credential NAME: its etcd user and role go, and its certificate is revoked",
		Args:  cobra.ExactArgs(1),
		RunE:  func(cmd *cobra.Command, args []string) error { return revokeCredential(cmd.OutOrStdout(), args[0], f) },
	}
	list := &cobra.Command{
		Use:   "list --cluster ENDPOINTS",
		Short: "List the cluster's application credentials",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return listCredentials(cmd.OutOrStdout(), f) },
	}
	for _, cmd := range []*cobra.Command{c, revoke, list} {
		cmd.Flags().StringVar(&f.cluster, "cluster", "", "the cluster's client ports (HOST:PORT, comma-separated)")
		cmd.Flags().StringVar(&f.fingerprint, "fingerprint", "", "the cluster CA's fingerprint; needed on first use")
		_ = cmd.MarkFlagRequired("cluster")
	}
	c.AddCommand(revoke, list)
	return c
}

func mintCredential(stdout io.Writer, f credentialFlags) error {
	if slices.Contains([]string{"revoke", "list"}, f.p.Name) {
		return fmt.Errorf("credential name %q is a command: choose another", f.p.Name)
	}
	var cert *pki.Cert
	endpoints := strings.Split(f.cluster, ",")
	err := asOwner(endpoints[0], f.fingerprint, func(ctx context.Context, c *clientv3.Client) error {
		owner, err := ownerKeyPair()
		if err != nil {
			return err
		}
		cert, _, err = admin.MintCredential(ctx, c, f.p, owner, time.Now())
		return err
	})
	if err != nil {
		return err
	}
	ca, err := pinnedCA(endpoints[0], f.fingerprint)
	if err != nil {
		return err
	}
	if err := writeCredential(f.out, f.p.Name, cert, ca); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "minted credential %s (etcd user app:%s, %s %s, until %s) in %s\n", f.p.Name, f.p.Name,
		map[bool]string{true: "reads", false: "reads and writes"}[f.p.ReadOnly], f.p.Prefix, cert.Cert.NotAfter.Format(time.RFC3339), f.out)
	for _, ep := range endpoints {
		if err := awaitCredential(stdout, ep, f.p.Prefix, cert, ca, f.wait); err != nil {
			return err
		}
	}
	fmt.Fprintf(stdout, "etcdctl --endpoints=https://%s --cacert=%s --cert=%s --key=%s get --prefix %s\n", endpoints[0],
		filepath.Join(f.out, "ca.pem"), filepath.Join(f.out, f.p.Name+".pem"), filepath.Join(f.out, f.p.Name+"-key.pem"), f.p.Prefix)
	return nil
}

// writeCredential writes credential name's certificate, key and the
// cluster CA to dir.
func writeCredential(dir, name string, cert *pki.Cert, ca *x509.Certificate) error {
	key, err := pki.KeyPEM(cert.Key)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return atomicfile.WriteAll(
		atomicfile.File{Path: filepath.Join(dir, name+"-key.pem"), Data: key, Perm: 0o600},
		atomicfile.File{Path: filepath.Join(dir, name+".pem"), Data: pki.CertPEM(cert.Cert), Perm: 0o644},
		atomicfile.File{Path: filepath.Join(dir, "ca.pem"), Data: pki.CertPEM(ca), Perm: 0o644},
	)
}

// awaitCredential waits up to wait until the member at endpoint takes the
// credential: it reads prefix with it.
func awaitCredential(stdout io.Writer, endpoint, prefix string, cert *pki.Cert, ca *x509.Certificate, wait time.Duration) error {
	kp := cert.TLS()
	c, err := admin.Connect([]string{endpoint}, ca, kp)
	if err != nil {
		return err
	}
	defer c.Close()
	err = poll.Until(context.Background(), wait, 2*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := c.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			fmt.Fprintf(stdout, "waiting for %s to take the credential (%v)\n", endpoint, err)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("%s does not take the credential after it was minted (its etcd restarts to trust the first credential of its owner): %w", endpoint, err)
	}
	fmt.Fprintf(stdout, "%s takes the credential\n", endpoint)
	return nil
}

func revokeCredential(stdout io.Writer, name string, f credentialFlags) error {
	node := strings.Split(f.cluster, ",")[0]
	return asOwner(node, f.fingerprint, func(ctx context.Context, c *clientv3.Client) error {
		owner, err := ownerKeyPair()
		if err != nil {
			return err
		}
		err = rememberCRL(node, func(remembered []byte) ([]byte, error) {
			return admin.RevokeCredential(ctx, c, name, owner, remembered)
		})
		if err == nil {
			fmt.Fprintf(stdout, "revoked credential %s: its etcd user and role are gone, its certificate revoked\n", name)
		}
		return err
	})
}

func listCredentials(stdout io.Writer, f credentialFlags) error {
	return asOwner(strings.Split(f.cluster, ",")[0], f.fingerprint, func(ctx context.Context, c *clientv3.Client) error {
		creds, err := admin.Credentials(ctx, c)
		if err != nil {
			return err
		}
		w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "NAME\tPREFIX\tACCESS\tVALID UNTIL")
		for _, name := range slices.Sorted(maps.Keys(creds)) {
			r := creds[name]
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", name, r.Prefix, map[bool]string{true: "read", false: "read-write"}[r.ReadOnly], r.NotAfter.Format(time.RFC3339))
		}
		return w.Flush()
	})
}
