package main

import (
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/borough-os/borough/internal/pki"
)

// configDir is where the owner's key, certificate and pinned cluster CAs
// live; the --config flag changes it.
var configDir string

func defaultConfigDir() string {
	dir, err := os.UserConfigDir()
	if err != nil {
		return ".borough"
	}
	return filepath.Join(dir, "borough")
}

func ownerKeyPath() string  { return filepath.Join(configDir, "owner-key.pem") }
func ownerCertPath() string { return filepath.Join(configDir, "owner.pem") }

func ownerCommand() *cobra.Command {
	c := &cobra.Command{Use: "owner", Short: "The owner's identity, which a cluster trusts"}
	var name string
	var force bool
	initCmd := &cobra.Command{
		Use:   "init",
		Short: "Create the owner's key and self-signed certificate in the config directory",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return ownerInit(cmd.OutOrStdout(), name, force)
		},
	}
	initCmd.Flags().StringVar(&name, "name", "owner", "the owner's name, in the certificate")
	initCmd.Flags().BoolVar(&force, "force", false, "replace an existing owner identity")
	c.AddCommand(initCmd)
	return c
}

func ownerInit(stdout io.Writer, name string, force bool) error {
	if _, err := os.Stat(ownerKeyPath()); err == nil && !force {
		return fmt.Errorf("%s exists; --force replaces it (clusters that trust the old certificate will refuse the new one)", ownerKeyPath())
	}
	owner, err := pki.NewOwner(name, time.Now())
	if err != nil {
		return err
	}
	cert, key := owner.Cert, owner.Key
	keyPEM, err := pki.KeyPEM(key)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(configDir, 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(ownerKeyPath(), keyPEM, 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(ownerCertPath(), pki.CertPEM(cert), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "owner %q: key %s, certificate %s (%s)\n", name, ownerKeyPath(), ownerCertPath(), pki.Fingerprint(cert))
	return nil
}

// loadOwnerCert reads the owner's certificate from path, or from the
// config directory when path is empty.
func loadOwnerCert(path string) (*x509.Certificate, error) {
	if path == "" {
		path = ownerCertPath()
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) && path == ownerCertPath() {
		return nil, fmt.Errorf("no owner certificate at %s: run `borough owner init` first, or give --no-owner", path)
	}
	if err != nil {
		return nil, err
	}
	c, err := pki.ParseCertPEM(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}
