// Package seals keeps, for one boot, every secret the node holds sealed to
// its TPM in a key file on the ESP, so that an update can seal each one to
// the PCR values its new boot binary will give, and the boot after settles
// them on its own.
//
// The keys are sealed to PCRs 4, 7 and 12 (package tpm), and PCR 4 is the
// boot binary's digest: a new boot binary cannot unseal keys sealed to the
// old one. The node caps the PCRs once it has unsealed what it needs, so
// an update, which comes later, cannot unseal them again to seal them
// anew: it seals the secrets this boot already holds. They are in the
// node's memory anyway (the volume key is in the kernel's; the unlock and
// escrow keys answer peers), so keeping them here adds no exposure.
//
// An update adds, beside each file's seal, a second one to the new boot
// binary's predicted PCR values (keyfile.File.Next), and keeps the first:
// until the new system confirms itself, the old one must still boot.
// Unseal tries both. A boot that finds a file with a second seal settles
// it once it knows the outcome: the confirmed new system, or the old one
// after a rollback, seals each secret to its own boot's values alone, so
// a version that was replaced cannot unseal the keys again.
package seals

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"sync"

	"github.com/borough-os/borough/internal/atomicfile"
	"github.com/borough-os/borough/internal/keyfile"
	"github.com/borough-os/borough/internal/tpm"
)

// Book seals and unseals the node's key files and remembers their
// secrets for the boot. Its zero value is not usable; set TPM and
// BootPCRs.
type Book struct {
	TPM *tpm.TPM
	// BootPCRs are this boot's PCR values from before they were capped;
	// nil seals to the TPM's current values.
	BootPCRs map[uint][]byte

	mu      sync.Mutex
	secrets map[string][]byte
	// next, once an update sealed to it, are the new boot binary's PCR
	// values: keys sealed after that get a second seal to them too.
	next map[uint][]byte
}

func (b *Book) remember(path string, secret []byte) {
	if b.secrets == nil {
		b.secrets = map[string][]byte{}
	}
	b.secrets[path] = slices.Clone(secret)
}

// Seal returns secret as a key file for path, sealed to this boot's PCR
// values (and to a pending update's), and remembers it.
func (b *Book) Seal(path string, secret []byte) ([]byte, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	f, err := b.seal(secret, b.next)
	if err != nil {
		return nil, err
	}
	b.remember(path, secret)
	return f.Marshal()
}

func (b *Book) seal(secret []byte, next map[uint][]byte) (keyfile.File, error) {
	var f keyfile.File
	var err error
	if f.Sealed, err = b.sealTo(secret, b.BootPCRs); err != nil {
		return f, err
	}
	if next != nil {
		f.Next, err = b.sealTo(secret, next)
	}
	return f, err
}

func (b *Book) sealTo(secret []byte, pcrs map[uint][]byte) ([]byte, error) {
	if pcrs == nil {
		var err error
		if pcrs, err = b.TPM.PCRs(tpm.DefaultPCRs); err != nil {
			return nil, err
		}
	}
	s, err := b.TPM.SealTo(secret, pcrs)
	if err != nil {
		return nil, err
	}
	return s.Marshal()
}

// Unseal returns the secret of f, the key file at path, from its seal or,
// in an update's try boot, from the seal for the update; and remembers it.
func (b *Book) Unseal(path string, f *keyfile.File) ([]byte, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	secret, err := b.unsealRaw(f.Sealed)
	if err != nil && f.HasNext() {
		if s, nerr := b.unsealRaw(f.Next); nerr == nil {
			secret, err = s, nil
		}
	}
	if err != nil {
		return nil, err
	}
	b.remember(path, secret)
	return secret, nil
}

// ErrParse says a key file's seal does not parse: it was not a TPM seal
// this node reads.
var ErrParse = errors.New("the sealed key does not parse")

func (b *Book) unsealRaw(raw []byte) ([]byte, error) {
	s, err := tpm.UnmarshalSealed(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrParse, err)
	}
	return b.TPM.Unseal(s)
}

// SealNext seals every remembered secret to pcrs too, the predicted values
// of an update's boot binary, beside its seal to this boot's, in its file.
func (b *Book) SealNext(pcrs map[uint][]byte) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.next = pcrs
	return b.rewrite(pcrs)
}

// Settle seals every remembered secret to this boot's values alone, once
// this boot knows an update's outcome (confirmed, or rolled back).
func (b *Book) Settle() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.next = nil
	return b.rewrite(nil)
}

// Files returns the paths of the remembered key files, sorted.
func (b *Book) Files() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Sorted(maps.Keys(b.secrets))
}

func (b *Book) rewrite(next map[uint][]byte) error {
	var errs []error
	for _, path := range slices.Sorted(maps.Keys(b.secrets)) {
		if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
			delete(b.secrets, path)
			continue
		}
		f, err := b.seal(b.secrets[path], next)
		if err == nil {
			var data []byte
			if data, err = f.Marshal(); err == nil {
				err = atomicfile.Write(path, data, 0o600)
			}
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("resealing %s: %w", path, err))
		}
	}
	return errors.Join(errs...)
}
