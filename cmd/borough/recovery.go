package main

import (
	"crypto/ecdsa"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	diskfs "github.com/diskfs/go-diskfs"
	"github.com/diskfs/go-diskfs/partition/gpt"
	"github.com/spf13/cobra"

	"github.com/borough-os/borough/esp"
	"github.com/borough-os/borough/internal/crypt"
	"github.com/borough-os/borough/internal/escrow"
	"github.com/borough-os/borough/internal/keyfile"
	"github.com/borough-os/borough/internal/partition"
	"github.com/borough-os/borough/internal/pki"
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

// readESPFile reads f from the ESP of disk.
func readESPFile(disk string, f esp.File) ([]byte, error) {
	d, err := diskfs.Open(disk, diskfs.WithOpenMode(diskfs.ReadOnly))
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", disk, err)
	}
	defer d.Close()
	espIndex, _, err := findPartition(disk, partition.ESPType)
	if err != nil {
		return nil, err
	}
	fs, err := d.GetFilesystem(espIndex)
	if err != nil {
		return nil, fmt.Errorf("reading the ESP of %s: %w", disk, err)
	}
	entries, err := fs.ReadDir(path.Dir(string(f)))
	i := -1
	if err == nil {
		if i = slices.IndexFunc(entries, func(e iofs.DirEntry) bool { return e.Name() == path.Base(string(f)) }); i < 0 {
			err = iofs.ErrNotExist
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%s is not on the ESP: %w", f, err)
	}
	info, err := entries[i].Info()
	if err != nil {
		return nil, fmt.Errorf("reading %s from the ESP: %w", f, err)
	}
	file, err := fs.OpenFile("/"+string(f), os.O_RDONLY)
	if err != nil {
		return nil, fmt.Errorf("reading %s from the ESP: %w", f, err)
	}
	// One read of the file's size: go-diskfs's FAT32 reader, past a
	// first read that ends inside a cluster, returns the rest of that
	// cluster, beyond the file's end (io.ReadAll read a 560-byte owner
	// recovery record back as 768 bytes, which JSON refused).
	b := make([]byte, info.Size())
	if _, err := io.ReadFull(file, b); err != nil {
		return nil, fmt.Errorf("reading %s from the ESP: %w", f, err)
	}
	return b, nil
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
	b, err := readESPFile(disk, esp.OwnerRecovery)
	if err != nil {
		return fmt.Errorf("%w (the node seals its keys for its owner once it runs in a cluster with one)", err)
	}
	var r escrow.OwnerRecovery
	if err := json.Unmarshal(b, &r); err != nil {
		return fmt.Errorf("%s: %w", esp.OwnerRecovery, err)
	}
	luk, cuk, err := r.Open(key)
	if err != nil {
		return err
	}
	if err := writeKeys(stdout, outDir, map[string][]byte{"luk.key": luk, "cuk.key": cuk}); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "keys of %s in cluster %s\n", r.Node, r.Cluster)
	return nil
}

func copyKeys(stdout io.Writer, disk, outDir string) error {
	keys := make(map[string][]byte)
	// The CUK first: if the cluster keeps it, that is what to say.
	for _, k := range []struct {
		name string
		f    esp.File
	}{{"cuk.key", esp.ClusterKeyEscrow}, {"luk.key", esp.SealedLocalKey}} {
		name, f := k.name, k.f
		b, err := readESPFile(disk, f)
		if errors.Is(err, iofs.ErrNotExist) && f == esp.ClusterKeyEscrow {
			if _, lerr := readESPFile(disk, esp.SealedLocalKey); errors.Is(lerr, iofs.ErrNotExist) {
				return fmt.Errorf("%s holds no unlock keys: its node never made a data volume (it has not booted, or it was reset), so there is nothing to recover", disk)
			}
			return fmt.Errorf("%w: the cluster keeps this node's cluster unlock key; its owner opens the disk with --owner-key", err)
		}
		if err != nil {
			return err
		}
		key, err := keyfile.ClearKey(b)
		if errors.Is(err, keyfile.ErrKeySealed) {
			return fmt.Errorf("%s: %w; unseal it on the node's own machine", f, err)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		keys[name] = key
	}
	// Both keys or none: one alone opens nothing.
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
	// A whole disk or image has a GPT with the data partition on it; a
	// partition does not.
	var start int64
	if _, p, err := findPartition(device, partition.DataType); err == nil {
		start = int64(p.Start) * 512
	}
	f, err := os.Open(device)
	if err != nil {
		return err
	}
	defer f.Close()
	state, header, err := crypt.Probe(io.NewSectionReader(f, start, 1<<62))
	if err != nil {
		return fmt.Errorf("%s: %w", device, err)
	}
	if state != crypt.StateFormatted {
		return fmt.Errorf("%s holds no Borough data volume (it is %s)", device, state)
	}
	key, err := header.VolumeKey(luk, cuk)
	if err != nil {
		return fmt.Errorf("%s: %w", device, err)
	}
	if err := writeSecret(out, key); err != nil {
		return err
	}
	offset := start/512 + crypt.DataOffset
	fmt.Fprintf(stdout, "wrote the volume key to %s; open the volume with:\n", out)
	fmt.Fprintln(stdout, strings.Join(CryptsetupArgs(out, device, offset), " "))
	return nil
}

// CryptsetupArgs is the standard command that opens a Borough volume whose
// ciphertext starts offset sectors into device.
func CryptsetupArgs(keyFile, device string, offset int64) []string {
	return []string{"cryptsetup", "open", "--type", "plain", "--cipher", crypt.Cipher,
		"--key-size", fmt.Sprint(crypt.KeySize * 8), "--key-file", keyFile,
		"--offset", fmt.Sprint(offset), device, "borough-data"}
}

// findPartition returns the number and entry of the partition of type typ
// on the GPT disk or image at path.
func findPartition(path, typ string) (int, *gpt.Partition, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, nil, err
	}
	defer f.Close()
	table, err := gpt.Read(f, 512, 512)
	var pathErr *iofs.PathError
	switch {
	case errors.As(err, &pathErr):
		return 0, nil, fmt.Errorf("reading %s: %w", path, err)
	case err != nil:
		// go-diskfs says which bytes it found instead of a signature:
		// nothing a user can act on.
		return 0, nil, fmt.Errorf("%s is not a disk image: it has no GPT partition table (a Borough image has one, as has a disk one was written to)", path)
	}
	for _, p := range table.Partitions {
		if strings.EqualFold(string(p.Type), typ) {
			return p.Index, p, nil
		}
	}
	return 0, nil, fmt.Errorf("%s has no partition of type %s", path, typ)
}

// writeSecret writes key material to a new file only the user can read. It
// refuses to replace a file (or follow a symlink) that is already there.
func writeSecret(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("writing key file: %w (remove it first)", err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
