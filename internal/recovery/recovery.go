// Package recovery opens a node's data volume without the node: from its
// disk (or an image of it), with the keys its ESP holds in clear (a node
// without a TPM, whose cluster does not keep its key) or the keys it
// sealed to its owner, and with standard tools (cryptsetup) once it has
// the volume key. It is the owner's side of README's "Recovery", apart
// from the owner's tool's commands, which read the owner's key and write
// the files.
package recovery

import (
	"crypto/ecdsa"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"os"

	"github.com/borough-os/borough/esp"
	"github.com/borough-os/borough/image"
	"github.com/borough-os/borough/internal/crypt"
	"github.com/borough-os/borough/internal/escrow"
	"github.com/borough-os/borough/internal/keyfile"
	"github.com/borough-os/borough/internal/partition"
)

// Key files, as the recovery commands name them.
const (
	LUKFile = "luk.key"
	CUKFile = "cuk.key"
)

// OwnerKeys opens the keys the node on disk sealed to its owner, whose
// key is owner, and returns them by file name with the record they came
// from.
func OwnerKeys(disk string, owner *ecdsa.PrivateKey) (map[string][]byte, *escrow.OwnerRecovery, error) {
	b, err := image.ReadESPFile(disk, esp.OwnerRecovery)
	if err != nil {
		return nil, nil, fmt.Errorf("%w (the node seals its keys for its owner once it runs in a cluster with one)", err)
	}
	var r escrow.OwnerRecovery
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", esp.OwnerRecovery, err)
	}
	luk, cuk, err := r.Open(owner)
	if err != nil {
		return nil, nil, err
	}
	return map[string][]byte{LUKFile: luk, CUKFile: cuk}, &r, nil
}

// ClearKeys returns both unlock keys the ESP of disk holds in clear, by
// file name, or says why it holds them otherwise: both or none, for one
// alone opens nothing.
func ClearKeys(disk string) (map[string][]byte, error) {
	keys := make(map[string][]byte)
	// The CUK first: if the cluster keeps it, that is what to say.
	for _, k := range []struct {
		name string
		f    esp.File
	}{{CUKFile, esp.ClusterKeyEscrow}, {LUKFile, esp.SealedLocalKey}} {
		b, err := image.ReadESPFile(disk, k.f)
		if errors.Is(err, iofs.ErrNotExist) && k.f == esp.ClusterKeyEscrow {
			if _, lerr := image.ReadESPFile(disk, esp.SealedLocalKey); errors.Is(lerr, iofs.ErrNotExist) {
				return nil, fmt.Errorf("%s holds no unlock keys: its node never made a data volume (it has not booted, or it was reset), so there is nothing to recover", disk)
			}
			return nil, fmt.Errorf("%w: the cluster keeps this node's cluster unlock key; its owner opens the disk with --owner-key", err)
		}
		if err != nil {
			return nil, err
		}
		key, err := keyfile.ClearKey(b)
		if errors.Is(err, keyfile.ErrKeySealed) {
			return nil, fmt.Errorf("%s: %w; unseal it on the node's own machine", k.f, err)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k.f, err)
		}
		keys[k.name] = key
	}
	return keys, nil
}

// VolumeKey derives the volume key of device (a data partition, or a
// whole disk or image) from its unlock keys, checked against the
// volume's header, and returns it with the sector its ciphertext starts
// at.
func VolumeKey(device string, luk, cuk []byte) (key []byte, offset int64, err error) {
	// A whole disk or image has a GPT with the data partition on it; a
	// partition does not.
	var start int64
	if _, p, err := image.FindPartition(device, partition.DataType); err == nil {
		start = int64(p.Start) * 512
	}
	f, err := os.Open(device)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	state, header, err := crypt.Probe(io.NewSectionReader(f, start, 1<<62))
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", device, err)
	}
	if state != crypt.StateFormatted {
		return nil, 0, fmt.Errorf("%s holds no Borough data volume (it is %s)", device, state)
	}
	key, err = header.VolumeKey(luk, cuk)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", device, err)
	}
	return key, start/512 + crypt.DataOffset, nil
}

// CryptsetupArgs is the standard command that opens a Borough volume whose
// ciphertext starts offset sectors into device.
func CryptsetupArgs(keyFile, device string, offset int64) []string {
	return []string{"cryptsetup", "open", "--type", "plain", "--cipher", crypt.Cipher,
		"--key-size", fmt.Sprint(crypt.KeySize * 8), "--key-file", keyFile,
		"--offset", fmt.Sprint(offset), device, "borough-data"}
}
