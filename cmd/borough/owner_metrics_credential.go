package main

import (
	"crypto"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/borough-os/borough/internal/atomicfile"
	"github.com/borough-os/borough/internal/metrics"
	"github.com/borough-os/borough/internal/pki"
	"github.com/borough-os/borough/internal/ports"
)

// defaultCredentialTTL is how long a metrics credential is valid unless
// --ttl says otherwise: a year, as the certificates Prometheus setups
// usually rotate.
const defaultCredentialTTL = 365 * 24 * time.Hour

func metricsCredentialCommand() *cobra.Command {
	var out string
	var ttl time.Duration
	c := &cobra.Command{
		Use:   "metrics-credential NAME",
		Short: "Mint a credential that reads every node's Prometheus metrics and nothing else",
		Long: `metrics-credential writes NAME.pem and NAME-key.pem to --out: a client
certificate signed by the owner's key that the node API accepts for ` + metrics.Path + `
only (no logs, no power, no updates), until --ttl has passed. It prints a
Prometheus scrape job that uses it; point its ca_file at the cluster CA
(borough etcd env prints where it is pinned) and list the nodes' APIs
(HOST:7835) as targets. To withdraw a credential before it expires, hand
the cluster to a new owner key (borough owner rotate).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return mintMetricsCredential(cmd.OutOrStdout(), args[0], out, ttl)
		},
	}
	c.Flags().StringVar(&out, "out", ".", "the directory to write the credential to")
	c.Flags().DurationVar(&ttl, "ttl", defaultCredentialTTL, "how long the credential is valid")
	return c
}

func mintMetricsCredential(stdout io.Writer, name, dir string, ttl time.Duration) error {
	if name != filepath.Base(name) || name == "." || name == ".." {
		return fmt.Errorf("metrics credential name %q: want a plain name, as prometheus, without a directory", name)
	}
	owner, err := ownerKeyPair()
	if err != nil {
		return err
	}
	signer, ok := owner.PrivateKey.(crypto.Signer)
	if !ok {
		return fmt.Errorf("the owner key (%T) cannot sign", owner.PrivateKey)
	}
	cred, err := metrics.Mint(owner.Leaf, signer, name, ttl, time.Now())
	if err != nil {
		return err
	}
	keyPEM, err := pki.KeyPEM(cred.Key)
	if err != nil {
		return err
	}
	certPath, keyPath := filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := atomicfile.Write(keyPath, keyPEM, 0o600); err != nil {
		return fmt.Errorf("writing the credential's key: %w", err)
	}
	if err := atomicfile.Write(certPath, pki.CertPEM(cred.Cert), 0o644); err != nil {
		return fmt.Errorf("writing the credential: %w", err)
	}
	abs := func(p string) string {
		if a, err := filepath.Abs(p); err == nil {
			return a
		}
		return p
	}
	fmt.Fprintf(stdout, "wrote metrics credential %q, valid until %s: %s, %s\n", name, cred.Cert.NotAfter.Format(time.RFC3339), certPath, keyPath)
	fmt.Fprintf(stdout, `# a Prometheus scrape job with it
scrape_configs:
  - job_name: borough
    scheme: https
    tls_config:
      ca_file: CLUSTER-CA.pem
      cert_file: %s
      key_file: %s
    static_configs:
      - targets: ["NODE:%d"]
`, abs(certPath), abs(keyPath), ports.NodeAPI)
	return nil
}
