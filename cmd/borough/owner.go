package main

import (
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/borough-os/borough/internal/atomicfile"
	"github.com/borough-os/borough/internal/ownerkey"
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

func ownerKeyPath() string  { return filepath.Join(configDir, "owner-key.age") }
func ownerCertPath() string { return filepath.Join(configDir, "owner.pem") }

// clearKeyPath is where an older Borough kept the owner key, in clear.
func clearKeyPath() string { return filepath.Join(configDir, "owner-key.pem") }

func ownerCommand() *cobra.Command {
	c := &cobra.Command{Use: "owner", Short: "The owner's identity, which a cluster trusts"}
	var name string
	var force bool
	initCmd := &cobra.Command{
		Use:   "init",
		Short: "Create the owner's key, encrypted with a passphrase, and self-signed certificate in the config directory",
		Long: `Create the owner's key and self-signed certificate in the config directory.
The key is encrypted with a passphrase (age, scrypt), asked on the terminal
or taken from $` + ownerkey.PassphraseEnv + ` or the file named by
$` + ownerkey.PassphraseFileEnv + `. Every command that acts as the owner
asks for it the same way. Losing the key or its passphrase loses the
owner: clusters that trust it accept no other, and the disks' owner
escrow opens with it alone.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return ownerInit(cmd.OutOrStdout(), name, force)
		},
	}
	initCmd.Flags().StringVar(&name, "name", "owner", "the owner's name, in the certificate")
	initCmd.Flags().BoolVar(&force, "force", false, "replace an existing owner identity, keeping the old one as a backup")
	c.AddCommand(initCmd)
	c.AddCommand(&cobra.Command{
		Use:   "encrypt",
		Short: "Encrypt an owner key kept in clear (owner-key.pem, from an older Borough) with a passphrase",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return ownerEncrypt(cmd.OutOrStdout()) },
	})
	c.AddCommand(ownerRotateCommand(), metricsCredentialCommand())
	return c
}

func ownerInit(stdout io.Writer, name string, force bool) error {
	if err := checkOwnerName(name); err != nil {
		return err
	}
	if _, err := os.Stat(ownerKeyPath()); err == nil && !force {
		return fmt.Errorf("%s exists; --force replaces it (clusters that trust the old certificate will refuse the new one)", ownerKeyPath())
	}
	owner, sealed, err := newOwner(name)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(configDir, 0o700); err != nil {
		return err
	}
	if err := backUpOwner(stdout); err != nil {
		return err
	}
	if err := atomicfile.Write(ownerKeyPath(), sealed, 0o600); err != nil {
		return err
	}
	if err := atomicfile.Write(ownerCertPath(), pki.CertPEM(owner.Cert), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "owner %q: key %s (encrypted), certificate %s (%s)\n", name, ownerKeyPath(), ownerCertPath(), pki.Fingerprint(owner.Cert))
	return nil
}

// newOwner makes an owner's key and self-signed certificate in name, and
// returns them with the key sealed with a new passphrase.
func newOwner(name string) (*pki.Cert, []byte, error) {
	pass, err := newPassphrase()
	if err != nil {
		return nil, nil, err
	}
	owner, err := pki.NewOwner(name, time.Now())
	if err != nil {
		return nil, nil, err
	}
	keyPEM, err := pki.KeyPEM(owner.Key)
	if err != nil {
		return nil, nil, err
	}
	sealed, err := ownerkey.Seal(keyPEM, pass)
	if err != nil {
		return nil, nil, err
	}
	return owner, sealed, nil
}

// backUpOwner renames an existing owner identity aside, and says where.
func backUpOwner(stdout io.Writer) error {
	suffix := ".replaced-" + time.Now().UTC().Format("20060102T150405Z")
	for _, path := range []string{ownerKeyPath(), ownerCertPath()} {
		if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err := os.Rename(path, path+suffix); err != nil {
			return fmt.Errorf("keeping the old owner identity: %w", err)
		}
		fmt.Fprintf(stdout, "kept the old %s as %s\n", filepath.Base(path), path+suffix)
	}
	return nil
}

// ownerEncrypt encrypts an owner key kept in clear and removes the clear
// copy.
func ownerEncrypt(stdout io.Writer) error {
	keyPEM, err := os.ReadFile(clearKeyPath())
	if err != nil {
		return fmt.Errorf("no owner key in clear: %w", err)
	}
	if _, err := os.Stat(ownerKeyPath()); err == nil {
		return fmt.Errorf("%s exists already; remove %s by hand if it is the same key", ownerKeyPath(), clearKeyPath())
	}
	pass, err := newPassphrase()
	if err != nil {
		return err
	}
	sealed, err := ownerkey.Seal(keyPEM, pass)
	if err != nil {
		return err
	}
	if err := atomicfile.Write(ownerKeyPath(), sealed, 0o600); err != nil {
		return err
	}
	if err := os.Remove(clearKeyPath()); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "owner key encrypted in %s; %s removed (a backup of it elsewhere is still in clear)\n", ownerKeyPath(), clearKeyPath())
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

// checkOwnerName refuses an owner name etcd could take for another user:
// etcd names the owner by it, and names beginning app: are application
// credentials' (admin.MintCredential).
func checkOwnerName(name string) error {
	if strings.HasPrefix(name, "app:") {
		return fmt.Errorf("--name %q: names beginning app: are application credentials' etcd users", name)
	}
	return nil
}
