package main

import (
	"context"
	"crypto/ecdsa"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/borough-os/borough/internal/admin"
	"github.com/borough-os/borough/internal/backup"
	"github.com/borough-os/borough/internal/pki"
)

func backupCommand() *cobra.Command {
	var fingerprint, out string
	var timeout time.Duration
	c := &cobra.Command{
		Use:   "backup NODE",
		Short: "Back up NODE's (HOST:PORT) cluster, as its owner, to a file only your key opens",
		Long: `backup takes an etcd snapshot from NODE while the cluster serves, and writes
it with what a restore needs (the cluster's name, its CA and the CA's key,
its revocations, the owner) to --out, checksummed and encrypted to your
owner key (an age file: filippo.io/age's tagged P-256 recipient). It
holds the CA's key: keep it as you keep your owner key. 'borough cluster
verify-backup' checks a backup without touching any node.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return takeBackup(cmd.OutOrStdout(), args[0], fingerprint, out, timeout)
		},
	}
	c.Flags().StringVar(&fingerprint, "fingerprint", "", "the cluster CA's fingerprint; needed on first use")
	c.Flags().StringVar(&out, "out", "", "file to write (required)")
	c.Flags().DurationVar(&timeout, "timeout", 30*time.Minute, "how long the backup may take")
	c.MarkFlagRequired("out")
	return c
}

func verifyBackupCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "verify-backup FILE",
		Short: "Check a backup with your owner key: that it is whole, and what it holds",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return verifyBackup(cmd.OutOrStdout(), args[0])
		},
	}
}

func takeBackup(stdout io.Writer, node, fingerprint, out string, timeout time.Duration) error {
	owner, err := ownerKeyPair()
	if err != nil {
		return err
	}
	c, err := ownerClient(node, fingerprint)
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	partial := out + ".partial"
	f, err := os.OpenFile(partial, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	defer os.Remove(partial)
	start, said := time.Now(), time.Now()
	fmt.Fprintf(stdout, "backing up the cluster of %s to %s\n", node, out)
	meta, err := admin.Backup(ctx, c, owner, f, func(n int64) {
		if time.Since(said) >= 2*time.Second {
			fmt.Fprintf(stdout, "backup: %s of the snapshot\n", mib(n))
			said = time.Now()
		}
	})
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("backing up the cluster of %s: %w", node, err)
	}
	if err := os.Rename(partial, out); err != nil {
		return err
	}
	if err := syncDir(filepath.Dir(out)); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s in %.1f s: cluster %s at revision %d, snapshot %s (sha256:%s), encrypted to owner %s\n",
		out, time.Since(start).Seconds(), meta.Cluster, meta.Revision, mib(meta.SnapshotSize), meta.SnapshotSHA256, pki.Fingerprint(owner.Leaf))
	return nil
}

func verifyBackup(stdout io.Writer, path string) error {
	meta, err := checkBackupFile(path)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s: a whole backup of cluster %s (CA %s), taken %s at revision %d: snapshot %s, %d key revisions\n",
		path, meta.Cluster, meta.caFingerprint, meta.Taken.Format(time.RFC3339), meta.Revision, mib(meta.SnapshotSize), meta.keys)
	return nil
}

// checkedBackup is a backup's description, checked, and how many key
// revisions its snapshot holds.
type checkedBackup struct {
	backup.Meta
	caFingerprint string
	keys          int
}

// checkBackupFile decrypts the backup at path with the owner's key and
// checks it whole (checksums, the snapshot a bolt database with etcd's
// keys, a CA with its key), writing nothing but a temporary copy of the
// snapshot.
func checkBackupFile(path string) (checkedBackup, error) {
	owner, err := ownerKeyPair()
	if err != nil {
		return checkedBackup{}, err
	}
	in, err := os.Open(path)
	if err != nil {
		return checkedBackup{}, err
	}
	defer in.Close()
	snap, err := os.CreateTemp("", "borough-backup-*.snapshot")
	if err != nil {
		return checkedBackup{}, err
	}
	defer os.Remove(snap.Name())
	meta, err := backup.Read(in, owner, snap)
	if cerr := snap.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return checkedBackup{}, fmt.Errorf("%s: %w", path, err)
	}
	keys, err := backup.CheckSnapshot(snap.Name())
	if err != nil {
		return checkedBackup{}, fmt.Errorf("%s: %w", path, err)
	}
	ca, err := pki.ParseCertPEM(meta.CA)
	if err != nil {
		return checkedBackup{}, fmt.Errorf("%s: its cluster CA: %w", path, err)
	}
	if len(meta.CAKey) == 0 {
		return checkedBackup{}, fmt.Errorf("%s: %w: it holds no CA key", path, backup.ErrDamaged)
	}
	return checkedBackup{Meta: meta, caFingerprint: pki.Fingerprint(ca), keys: keys}, nil
}

// ownerECDSAKey is the owner's private key, to which backups and the
// nodes' unlock keys are sealed.
func ownerECDSAKey() (*ecdsa.PrivateKey, error) {
	owner, err := ownerKeyPair()
	if err != nil {
		return nil, err
	}
	key, ok := owner.PrivateKey.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("the owner key is a %T: backups and unlock keys are sealed to ECDSA P-256 owner keys", owner.PrivateKey)
	}
	return key, nil
}

// mib is n bytes in MiB, for progress.
func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
