package storage

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"

	"github.com/borough-os/borough/esp"
	"github.com/borough-os/borough/internal/crypt"
	"github.com/borough-os/borough/internal/keyfile"
	"github.com/borough-os/borough/internal/seals"
	"github.com/borough-os/borough/internal/tpm"
)

// Errors of keys whose seal cannot be opened. Storage wraps them with what
// the operator can do.
var (
	ErrNoTPMForKey = errors.New("the key is sealed to a TPM, but this machine has none")
	ErrKeyInClear  = errors.New("the key is stored in clear, but the storage policy requires a TPM")
	ErrTPMDisabled = errors.New("the key is sealed to the TPM, but the storage policy disables the TPM")
)

// keyFiles seals keys to the TPM, if it has one, and stores them as key
// files (package keyfile) on the ESP mounted at root.
type keyFiles struct {
	root   string
	tpm    *tpm.TPM
	policy keyfile.TPMPolicy
	// book seals and unseals, and remembers the keys for an update
	// (package seals); without one, keys are sealed to tpm's current
	// values and not remembered.
	book *seals.Book
}

// seals returns what seals and unseals the key files' keys: nil, which
// keeps them in clear, without a TPM.
func (k keyFiles) seals() *seals.Book {
	switch {
	case k.book != nil:
		return k.book
	case k.tpm != nil:
		return &seals.Book{TPM: k.tpm}
	}
	return nil
}

// newKey returns a fresh unlock key from crypto/rand, mixed with the TPM's
// generator when there is a TPM: the key is as strong as the better of the
// two.
func (k keyFiles) newKey() ([]byte, error) {
	key := make([]byte, crypt.UnlockKeySize)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	if k.tpm == nil {
		return key, nil
	}
	extra, err := k.tpm.Random(crypt.UnlockKeySize)
	if err != nil {
		return nil, fmt.Errorf("reading TPM random numbers: %w", err)
	}
	mixed := sha256.Sum256(append(key, extra...))
	clear(key)
	return mixed[:], nil
}

// store seals key (if there is a TPM) and writes it to f.
func (k keyFiles) store(f esp.File, key []byte) error {
	b, err := k.seals().Seal(f.In(k.root), key)
	if err != nil {
		return fmt.Errorf("sealing %s: %w", f, err)
	}
	return writeESP(k.root, f, b)
}

// load reads f and unseals the key in it.
func (k keyFiles) load(f esp.File) ([]byte, error) {
	b, err := readESP(k.root, f)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", f, err)
	}
	kf, err := keyfile.Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f, err)
	}
	switch {
	case kf.IsSealed():
		if k.policy == keyfile.TPMDisabled {
			return nil, fmt.Errorf("%s: %w", f, ErrTPMDisabled)
		}
		if k.tpm == nil {
			return nil, fmt.Errorf("%s: %w", f, ErrNoTPMForKey)
		}
		key, err := k.unseal(f, kf)
		if err != nil {
			return nil, err
		}
		return checkSize(f, key)
	case kf.Clear != nil:
		if k.policy == keyfile.TPMRequired {
			return nil, fmt.Errorf("%s: %w", f, ErrKeyInClear)
		}
		return checkSize(f, kf.Clear)
	default:
		return nil, fmt.Errorf("%s holds no key", f)
	}
}

// unseal opens the sealed key in kf, the key file f.
func (k keyFiles) unseal(f esp.File, kf *keyfile.File) ([]byte, error) {
	key, err := k.seals().Unseal(f.In(k.root), kf)
	switch {
	case errors.Is(err, seals.ErrParse):
		return nil, fmt.Errorf("parsing %s: %w", f, err)
	case err != nil:
		return nil, fmt.Errorf("unsealing %s: %w", f, err)
	}
	return key, nil
}

// KeyPolicy returns the storage policy under which an established node's
// local unlock key, on the ESP mounted at espRoot, was kept: a sealed key
// needs the TPM, a key in clear never used it. The node unlocks by it,
// not by its enrolment record's policy, until the data volume has
// confirmed that record (package enrolment): an ESP edit must not lower
// how the keys are kept, nor lock the node out by raising it. A key file
// that does not read gives fallback; unlocking then says what is wrong.
func KeyPolicy(espRoot string, fallback keyfile.TPMPolicy) keyfile.TPMPolicy {
	b, err := readESP(espRoot, esp.SealedLocalKey)
	if err != nil {
		return fallback
	}
	kf, err := keyfile.Parse(b)
	switch {
	case err != nil:
		return fallback
	case kf.IsSealed():
		return keyfile.TPMRequired
	case kf.Clear != nil:
		return keyfile.TPMDisabled
	}
	return fallback
}

// CheckPolicy refuses a confirmed storage policy that the keys the node
// unlocked with, kept under used (KeyPolicy), do not meet: a key in clear
// where the policy requires the TPM.
func CheckPolicy(confirmed, used keyfile.TPMPolicy) error {
	if confirmed == keyfile.TPMRequired && used == keyfile.TPMDisabled {
		return fmt.Errorf("%s holds the local unlock key in clear, but this node's storage policy requires the TPM: "+
			"someone replaced the sealed key. Recover the volume with both unlock keys (README: Recovery)", esp.SealedLocalKey)
	}
	return nil
}

func checkSize(f esp.File, key []byte) ([]byte, error) {
	if len(key) != crypt.UnlockKeySize {
		return nil, fmt.Errorf("%s holds a %d-byte key, want %d", f, len(key), crypt.UnlockKeySize)
	}
	return key, nil
}

// ClusterKeys supplies the cluster unlock key (CUK), the half of the
// volume key that the node does not keep alone once it is in a cluster.
// Storage asks for a new one when it creates the volume, and for the
// existing one on every later boot.
type ClusterKeys interface {
	// New returns a new CUK and makes sure it can be had again with Get
	// (durably) before returning.
	New() ([]byte, error)
	// Get returns the CUK made by New, waiting for it until ctx ends if
	// others hold it.
	Get(ctx context.Context) ([]byte, error)
}

// Escrow keeps the CUK on the ESP (esp.ClusterKeyEscrow), sealed exactly
// like the local unlock key: on a node alone, and on a new member until
// its peers hold the CUK (internal/clusterkey).
type Escrow struct {
	k keyFiles
}

// LocalEscrow is the Escrow on the ESP mounted at espRoot of a node with
// policy, whose keys book seals (nil: no TPM, or a disabled one) to this
// boot's PCR values from before they were capped.
func LocalEscrow(espRoot string, policy keyfile.TPMPolicy, book *seals.Book) Escrow {
	k := keyFiles{root: espRoot, policy: policy}
	if book != nil && policy != keyfile.TPMDisabled {
		k.tpm, k.book = book.TPM, book
	}
	return Escrow{k: k}
}

// Put stores cuk again, as when a cluster shrank to one voter and the
// peers can no longer hold it.
func (e Escrow) Put(cuk []byte) error {
	return e.k.store(esp.ClusterKeyEscrow, cuk)
}

// New implements ClusterKeys.
func (e Escrow) New() ([]byte, error) {
	key, err := e.k.newKey()
	if err != nil {
		return nil, err
	}
	return key, e.k.store(esp.ClusterKeyEscrow, key)
}

// Get implements ClusterKeys.
func (e Escrow) Get(context.Context) ([]byte, error) {
	return e.k.load(esp.ClusterKeyEscrow)
}
