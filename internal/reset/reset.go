// Package reset brings a node back to its first boot without re-imaging
// it, on its owner's request (`borough node reset`), and erases what it
// was: a machine that leaves its cluster must not carry the cluster's
// data, or keys that open it, to its next life.
//
// The owner's request only leaves a mark on the ESP (Request) and reboots
// the node; the erasing is the next boot's first step once the ESP's
// ledger is open (Erase), before anything mounts or unlocks the data
// volume, so that nothing holds it open, and a power cut in the middle
// erases again at the boot after: the mark goes last. The mark goes
// through the node's ledger (package espledger): on a node with a TPM,
// a mark someone wrote on the ESP with the machine off, to make the node
// erase itself and wait for a config from their key, is not listed there,
// and is refused and removed (Requested). Three erasures, each enough
// alone:
//
//   - the data volume's header, with the salt from which the volume key is
//     derived: zeroed, so that no unlock key, the owner's escrowed copies
//     included, derives the volume key again (package crypt), and the
//     next boot finds an empty partition and makes a new volume;
//   - the node's sealed keys, escrow, certificates, records and
//     enrolment on the ESP, overwritten before they are unlinked (FAT
//     keeps unlinked clusters: atomicfile.Erase);
//   - the TPM's epoch counter, advanced: every key the node sealed names
//     the epoch it was sealed in (tpm.SealTo), so a copy of the ESP taken
//     before the reset unseals nothing afterwards. Borough defines no
//     other TPM objects that hold secrets; its counters stay, as the
//     TPM's own anti-rollback.
//
// What the reset leaves: the boot binaries and node payloads (the image),
// the update record, the entropy seed and the release statement; and it
// writes the certificate of the owner who asked for it (esp.ResetOwner):
// the node then waits for an enrolment config from its owner if it has
// none in fw_cfg or on its ESP, instead of founding an ownerless cluster.
package reset

import (
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/borough-os/borough/esp"
	"github.com/borough-os/borough/internal/atomicfile"
	"github.com/borough-os/borough/internal/espledger"
	"github.com/borough-os/borough/internal/pki"
	"github.com/borough-os/borough/internal/tpm"
)

// headerBytes is how much of the data partition Erase zeroes: more than
// the volume's header and padding (crypt.DataOffset, 1 MiB), as much as
// crypt.Probe reads to call a partition empty.
const headerBytes = 2 << 20

// keys are the ESP files that hold what the node's data volume and its
// cluster know it by: its sealed keys, escrow, identity, records, ledger
// and network.
var keys = []esp.File{
	esp.SealedLocalKey, esp.ClusterKeyEscrow, esp.LedgerKey, esp.UnlockKey, esp.EscrowKey,
	esp.OwnerRecovery, esp.CUKEscrow, esp.UnlockCert, esp.UnlockCA, esp.UnlockCRL,
	esp.NodeState, esp.MemberDirectory, esp.Ledger, esp.Network, esp.NetworkTrial, esp.NetworkConfirmed,
}

// state are the ESP files that make the node what it was: erased.
var state = append(slices.Clone(keys), esp.DHCPLeases, esp.EnrolmentConfig, esp.PushedEnrolment, esp.AppliedEnrolment)

// Request marks the node for a reset at its next boot by owner (nil for
// a node without one), whom the node, reset, waits for an enrolment
// config from (esp.ResetOwner), through its ledger l.
func Request(l *espledger.Ledger, owner *x509.Certificate) error {
	mark := []byte("reset\n")
	if owner != nil {
		mark = pki.CertPEM(owner)
	}
	if err := l.Write(map[esp.File][]byte{esp.ResetRequest: mark}); err != nil {
		return fmt.Errorf("asking for a reset: %w", err)
	}
	return nil
}

// Requested says whether the node is marked for a reset, as its ledger l
// lists. A mark the ledger refuses is removed, and Requested says why.
func Requested(l *espledger.Ledger, espRoot string) (bool, error) {
	_, err := l.Read(esp.ResetRequest)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return false, nil
	case err != nil:
		if rerr := atomicfile.Remove(esp.ResetRequest.In(espRoot)); rerr != nil {
			return false, fmt.Errorf("refusing the reset mark on the ESP (%w), and removing it: %w", err, rerr)
		}
		return false, fmt.Errorf("refused and removed the reset mark on the ESP: %w", err)
	}
	return true, nil
}

// Erase erases the node (the package doc): the header of the data
// partition at data, the node's state on the ESP at espRoot, and every
// earlier seal of the TPM t (nil: the node seals nothing), then the mark.
func Erase(log *slog.Logger, data, espRoot string, t *tpm.TPM) error {
	if err := zeroHeader(data); err != nil {
		return err
	}
	log.Info("zeroed the data volume's header: no key derives its volume key again", "partition", data)
	for _, f := range state {
		if err := atomicfile.Erase(f.In(espRoot)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("erasing %s: %w", f, err)
		}
	}
	log.Info("erased the node's keys, escrow, certificates, records and enrolment from the ESP")
	if err := keepOwner(espRoot); err != nil {
		return err
	}
	if t != nil {
		epoch, err := t.Advance()
		if err != nil {
			return fmt.Errorf("advancing the TPM's epoch: %w", err)
		}
		log.Info("advanced the TPM's epoch: nothing sealed before unseals", "epoch", epoch)
	}
	if err := atomicfile.Remove(esp.ResetRequest.In(espRoot)); err != nil {
		return fmt.Errorf("removing the reset's mark: %w", err)
	}
	return nil
}

// EraseLeftovers erases what an earlier life of the node left on the ESP
// at espRoot (its keys, identity, records and ledger, not its enrolment
// config), on a node whose data partition is fresh, and moves the TPM
// t's epoch on (nil: the node seals nothing), before anything unseals: a
// new volume must not inherit a node key or escrow key someone may have
// copied, or that a cluster still knows. A first boot cut short before
// its volume was complete leaves the same files, and starts again from
// nothing. It says whether there was anything to erase.
func EraseLeftovers(log *slog.Logger, espRoot string, t *tpm.TPM) (bool, error) {
	var found []esp.File
	for _, f := range keys {
		if _, err := os.Stat(f.In(espRoot)); err == nil {
			found = append(found, f)
		}
	}
	if len(found) == 0 {
		return false, nil
	}
	for _, f := range found {
		if err := atomicfile.Erase(f.In(espRoot)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return true, fmt.Errorf("erasing %s: %w", f, err)
		}
	}
	log.Warn("the data partition is empty, but the ESP holds the keys and records of an earlier life of this node "+
		"(or of a first boot cut short): erased them", "files", len(found))
	if t == nil {
		return true, nil
	}
	epoch, err := t.Advance()
	if err != nil {
		return true, fmt.Errorf("advancing the TPM's epoch: %w", err)
	}
	log.Info("advanced the TPM's epoch: nothing sealed before unseals", "epoch", epoch)
	return true, nil
}

// keepOwner writes the owner the mark names, if it names one, as the one
// the node waits for an enrolment config from.
func keepOwner(espRoot string) error {
	mark, err := os.ReadFile(esp.ResetRequest.In(espRoot))
	if err != nil {
		return err
	}
	if _, err := pki.ParseCertPEM(mark); err != nil {
		return nil
	}
	if err := atomicfile.Write(esp.ResetOwner.In(espRoot), mark, 0o600); err != nil {
		return fmt.Errorf("keeping the owner who reset the node: %w", err)
	}
	return nil
}

// zeroHeader zeroes the first headerBytes of the partition at path, and
// flushes them to the disk.
func zeroHeader(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("opening the data partition: %w", err)
	}
	defer f.Close()
	if _, err := f.WriteAt(make([]byte, headerBytes), 0); err != nil {
		return fmt.Errorf("zeroing the data volume's header: %w", err)
	}
	if err := unix.Fsync(int(f.Fd())); err != nil {
		return fmt.Errorf("zeroing the data volume's header: %w", err)
	}
	return nil
}
