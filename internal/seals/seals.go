// Package seals keeps, for one boot, every secret the node holds sealed to
// its TPM in a key file on the ESP, so that an update can seal each one to
// the PCR values its new boot binary will give, and the boot after settles
// them on its own. It is the sealing layer of the keys' map
// (docs/keys.md), over package tpm, beside keyfile's format.
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
//
// A copy of an older key file put back (from freed FAT clusters, or from
// a copy of the disk taken earlier) must not unseal either: a sealed
// cluster unlock key from before the cluster took it would open the node
// alone, and a key sealed to a replaced boot binary would run the old
// version. So every seal also names the TPM's epoch, a monotonic counter
// in its NV memory (tpm.TPM.Epoch), which moves on once a file is gone or
// a boot binary replaced: Settle advances it, and so does Retire, once the
// cluster holds the node's cluster unlock key. An advance first
// seals every remembered secret to the next epoch beside its current
// seal, then moves the counter, then drops the old seals, so that a crash
// at any step leaves each file a seal that unseals; a boot that finds a
// file with two seals and no update pending settles it (Pending), as it
// does a file sealed before Borough had epochs. Seals without an epoch
// that were copied before that boot still open in the boot binary they
// were sealed to: epochs protect from the first settle on.
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
// BootPCRs. A nil Book is a node without a TPM in use: it keeps secrets
// in clear key files.
type Book struct {
	TPM *tpm.TPM
	// BootPCRs are this boot's PCR values from before they were capped;
	// nil seals to the TPM's current values.
	BootPCRs map[uint][]byte
	// Epoch is the TPM's epoch (tpm.TPM.Epoch), which every seal names;
	// 0 seals without one (and an advance only reseals).
	Epoch uint64

	mu      sync.Mutex
	secrets map[string][]byte
	// pending says a file this boot unsealed wants settling (Pending).
	pending bool
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
// values (and to a pending update's), and remembers it; in clear for a
// nil b.
func (b *Book) Seal(path string, secret []byte) ([]byte, error) {
	if b == nil {
		return keyfile.File{Clear: secret}.Marshal()
	}
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
	if f.Sealed, err = b.sealTo(secret, b.BootPCRs, b.Epoch); err != nil {
		return f, err
	}
	if next != nil {
		f.Next, err = b.sealTo(secret, next, b.Epoch)
	}
	return f, err
}

func (b *Book) sealTo(secret []byte, pcrs map[uint][]byte, epoch uint64) ([]byte, error) {
	if pcrs == nil {
		var err error
		if pcrs, err = b.TPM.PCRs(tpm.DefaultPCRs); err != nil {
			return nil, err
		}
	}
	s, err := b.TPM.SealTo(secret, pcrs, epoch)
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
	b.pending = b.pending || f.HasNext()
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

// UnsealFile returns the secret in data, the key file at path, sealed or
// in clear; a nil b unseals nothing. It works until the PCRs are capped.
func (b *Book) UnsealFile(path string, data []byte) ([]byte, error) {
	f, err := keyfile.Parse(data)
	if err != nil {
		return nil, err
	}
	switch {
	case !f.IsSealed() && len(f.Clear) == 0:
		return nil, errors.New("the key file holds no key")
	case !f.IsSealed():
		return f.Clear, nil
	case b == nil:
		return nil, errors.New("the key is sealed to a TPM, and this node has none in use")
	}
	return b.Unseal(path, f)
}

// ErrParse says a key file's seal does not parse: it was not a TPM seal
// this node reads.
var ErrParse = errors.New("the sealed key does not parse")

func (b *Book) unsealRaw(raw []byte) ([]byte, error) {
	s, err := tpm.UnmarshalSealed(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrParse, err)
	}
	secret, err := b.TPM.Unseal(s)
	if err == nil && s.Epoch == 0 && b.Epoch != 0 {
		// Sealed by a Borough before epochs: settling seals it to one.
		b.pending = true
	}
	return secret, err
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
// this boot knows an update's outcome (confirmed, or rolled back), and
// advances the epoch: no copy of a file sealed to the boot binary that
// lost, put back, unseals again.
func (b *Book) Settle() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.next = nil
	b.pending = false
	return b.advance()
}

// Pending says whether a file this boot unsealed wants settling: it had
// two seals (an update pending, or a Settle or Retire that a crash cut
// short), or a seal without an epoch, made before Borough had them.
func (b *Book) Pending() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.pending
}

// Retire stops remembering the key file at path, which the caller erases
// next, and advances the epoch: no copy of it put back unseals again.
// While an update is pending it refuses, remembering the file still, so
// that the update seals it for the new boot binary too. A nil b does
// nothing: the file was in clear.
func (b *Book) Retire(path string) error {
	if b == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.next != nil {
		return errPending
	}
	delete(b.secrets, path)
	return b.advance()
}

// errPending refuses to advance the epoch while an update is pending.
var errPending = errors.New("advancing the epoch: an update is pending; its outcome settles the keys first")

// advance moves the TPM's epoch on and seals every remembered secret to
// this boot's values and the new epoch alone: no copy of a key file from
// before, put back, unseals again. Without epochs it only seals to this
// boot's values. The caller holds b.mu, with no update pending.
func (b *Book) advance() error {
	if b.Epoch == 0 {
		return b.rewrite(nil)
	}
	next := b.Epoch + 1
	err := b.write(func(secret []byte) (keyfile.File, error) {
		var f keyfile.File
		var err error
		if f.Sealed, err = b.sealTo(secret, b.BootPCRs, next); err == nil {
			f.Next, err = b.sealTo(secret, b.BootPCRs, b.Epoch)
		}
		return f, err
	})
	if err != nil {
		return fmt.Errorf("advancing the epoch: %w", err)
	}
	now, err := b.TPM.Advance()
	if err != nil {
		return fmt.Errorf("advancing the epoch: %w", err)
	}
	if now != next {
		return fmt.Errorf("advancing the epoch: the TPM's counter went from %d to %d, not %d: something else moves it", b.Epoch, now, next)
	}
	b.Epoch = next
	return b.rewrite(nil)
}

// Files returns the paths of the remembered key files, sorted.
func (b *Book) Files() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Sorted(maps.Keys(b.secrets))
}

// rewrite seals every remembered secret to this boot's values (and to
// next, if set) and replaces its file.
func (b *Book) rewrite(next map[uint][]byte) error {
	return b.write(func(secret []byte) (keyfile.File, error) { return b.seal(secret, next) })
}

// write replaces the file of every remembered secret with what seal makes
// of it. A file that is gone is forgotten.
func (b *Book) write(seal func(secret []byte) (keyfile.File, error)) error {
	var errs []error
	for _, path := range slices.Sorted(maps.Keys(b.secrets)) {
		if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
			delete(b.secrets, path)
			continue
		}
		f, err := seal(b.secrets[path])
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
