package main

import (
	"crypto/ecdsa"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/borough-os/borough/internal/pki"
	"github.com/borough-os/borough/internal/recovery"
)

func recoveryCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "recovery",
		Short: "Open a node's data volume without the node, with its two unlock keys",
		Long: `A Borough data volume is plain dm-crypt (aes-xts-plain64, 512-bit key)
behind a 1 MiB header. With both unlock keys, 'recovery volume-key' derives
the volume key and prints the standard cryptsetup command that opens it.
'recovery keys' copies the keys off a disk whose node had no TPM (they are
in clear on its ESP); a TPM-sealed key must be unsealed on its machine.
With --owner-key, it opens instead the keys the node sealed to its
cluster owner's key: the disk alone is enough then, whatever became of
the machine and the cluster.`,
	}
	c.AddCommand(recoveryKeysCommand(), recoveryVolumeKeyCommand())
	return c
}

func recoveryKeysCommand() *cobra.Command {
	var outDir, ownerKey string
	c := &cobra.Command{
		Use:   "keys DISK",
		Short: "Copy the unlock keys (luk.key, cuk.key) off the ESP of a disk or image: in clear (no TPM) or sealed to the owner",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if ownerKey != "" {
				return ownerKeys(cmd.OutOrStdout(), args[0], ownerKey, outDir)
			}
			return copyKeys(cmd.OutOrStdout(), args[0], outDir)
		},
	}
	c.Flags().StringVar(&outDir, "out", ".", "directory for luk.key and cuk.key")
	c.Flags().StringVar(&ownerKey, "owner-key", "", "the cluster owner's private key (owner-key.age, or PEM): open the keys the node sealed to its owner")
	return c
}

// ownerKeys opens the keys the node on disk sealed to its owner.
func ownerKeys(stdout io.Writer, disk, ownerKey, outDir string) error {
	pemKey, err := readOwnerKey(ownerKey)
	if err != nil {
		return err
	}
	signer, err := pki.ParseKeyPEM(pemKey)
	if err != nil {
		return fmt.Errorf("%s: %w", ownerKey, err)
	}
	key, ok := signer.(*ecdsa.PrivateKey)
	if !ok {
		return fmt.Errorf("%s is a %T key, not the owner's ECDSA key", ownerKey, signer)
	}
	keys, r, err := recovery.OwnerKeys(disk, key)
	if err != nil {
		return err
	}
	if err := writeKeys(stdout, outDir, keys); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "keys of %s in cluster %s\n", r.Node, r.Cluster)
	return nil
}

func copyKeys(stdout io.Writer, disk, outDir string) error {
	keys, err := recovery.ClearKeys(disk)
	if err != nil {
		return err
	}
	return writeKeys(stdout, outDir, keys)
}

// writeKeys writes each key to its name in outDir.
func writeKeys(stdout io.Writer, outDir string, keys map[string][]byte) error {
	for _, name := range slices.Sorted(maps.Keys(keys)) {
		path := filepath.Join(outDir, name)
		if err := writeSecret(path, keys[name]); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "wrote %s\n", path)
	}
	return nil
}

func recoveryVolumeKeyCommand() *cobra.Command {
	var luk, cuk, out string
	c := &cobra.Command{
		Use:   "volume-key DEVICE",
		Short: "Derive the volume key of DEVICE (a data partition, or a whole disk or image) and print the cryptsetup command",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return volumeKey(cmd.OutOrStdout(), args[0], luk, cuk, out)
		},
	}
	c.Flags().StringVar(&luk, "luk", "luk.key", "file with the 32-byte local unlock key")
	c.Flags().StringVar(&cuk, "cuk", "cuk.key", "file with the 32-byte cluster unlock key")
	c.Flags().StringVar(&out, "out", "volume.key", "file to write the 64-byte volume key to")
	return c
}

func volumeKey(stdout io.Writer, device, lukPath, cukPath, out string) error {
	luk, err := os.ReadFile(lukPath)
	if err != nil {
		return fmt.Errorf("reading local unlock key: %w", err)
	}
	cuk, err := os.ReadFile(cukPath)
	if err != nil {
		return fmt.Errorf("reading cluster unlock key: %w", err)
	}
	key, offset, err := recovery.VolumeKey(device, luk, cuk)
	if err != nil {
		return err
	}
	if err := writeSecret(out, key); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote the volume key to %s; open the volume with:\n", out)
	fmt.Fprintln(stdout, strings.Join(recovery.CryptsetupArgs(out, device, offset), " "))
	return nil
}

// writeSecret writes key material to a new file only the user can read. It
// refuses to replace a file (or follow a symlink) that is already there.
func writeSecret(path string, b []byte) error {
	if err := writeNew(path, b); err != nil {
		return fmt.Errorf("writing key file: %w (remove it first)", err)
	}
	return nil
}
