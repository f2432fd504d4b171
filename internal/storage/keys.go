package storage

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/borough-os/borough/esp"
	"github.com/borough-os/borough/internal/crypt"
	"github.com/borough-os/borough/internal/tpm"
)

// TPMPolicy says whether unlock keys must be sealed to a TPM.
type TPMPolicy int

const (
	// TPMBestEffort seals to the TPM when there is one and stores keys in
	// clear (with a loud warning) when there is none.
	TPMBestEffort TPMPolicy = iota
	// TPMRequired refuses to run without a TPM.
	TPMRequired
	// TPMDisabled never uses the TPM; keys are stored in clear.
	TPMDisabled
)

func (p TPMPolicy) String() string {
	switch p {
	case TPMBestEffort:
		return "best-effort"
	case TPMRequired:
		return "required"
	case TPMDisabled:
		return "disabled"
	}
	return fmt.Sprintf("TPMPolicy(%d)", int(p))
}

// keyFileVersion is the version of keyFile this node writes and reads.
const keyFileVersion = 1

// keyFile is how an unlock key is kept on the ESP: sealed to the TPM, or,
// without one, in clear.
type keyFile struct {
	Version int             `json:"version"`
	Sealed  json.RawMessage `json:"sealed,omitempty"`
	Clear   []byte          `json:"clear,omitempty"`
}

// isSealed says whether the file holds a sealed key; a JSON null is none.
func (kf keyFile) isSealed() bool {
	return len(kf.Sealed) > 0 && string(kf.Sealed) != "null"
}

// Errors of keys whose seal cannot be opened. Storage wraps them with what
// the operator can do.
var (
	ErrNoTPMForKey = errors.New("the key is sealed to a TPM, but this machine has none")
	ErrKeyInClear  = errors.New("the key is stored in clear, but the storage policy requires a TPM")
	ErrTPMDisabled = errors.New("the key is sealed to the TPM, but the storage policy disables the TPM")
)

// keeper seals keys to the TPM, if it has one, and stores them on the ESP
// mounted at root.
type keeper struct {
	root   string
	tpm    *tpm.TPM
	policy TPMPolicy
}

// newKey returns a fresh unlock key from crypto/rand, mixed with the TPM's
// generator when there is a TPM: the key is as strong as the better of the
// two.
func (k keeper) newKey() ([]byte, error) {
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
func (k keeper) store(f esp.File, key []byte) error {
	kf := keyFile{Version: keyFileVersion}
	if k.tpm != nil {
		sealed, err := k.tpm.Seal(key, tpm.DefaultPCRs)
		if err != nil {
			return fmt.Errorf("sealing %s: %w", f, err)
		}
		if kf.Sealed, err = sealed.Marshal(); err != nil {
			return err
		}
	} else {
		kf.Clear = key
	}
	b, err := json.Marshal(kf)
	if err != nil {
		return err
	}
	return writeESP(k.root, f, b)
}

// load reads f and unseals the key in it.
func (k keeper) load(f esp.File) ([]byte, error) {
	b, err := readESP(k.root, f)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", f, err)
	}
	var kf keyFile
	if err := json.Unmarshal(b, &kf); err != nil {
		return nil, fmt.Errorf("parsing %s: %w", f, err)
	}
	if kf.Version != keyFileVersion {
		return nil, fmt.Errorf("%s has version %d, this node reads version %d", f, kf.Version, keyFileVersion)
	}
	switch {
	case kf.isSealed():
		if k.policy == TPMDisabled {
			return nil, fmt.Errorf("%s: %w", f, ErrTPMDisabled)
		}
		if k.tpm == nil {
			return nil, fmt.Errorf("%s: %w", f, ErrNoTPMForKey)
		}
		sealed, err := tpm.UnmarshalSealed(kf.Sealed)
		if err != nil {
			return nil, fmt.Errorf("parsing %s: %w", f, err)
		}
		key, err := k.tpm.Unseal(sealed)
		if err != nil {
			return nil, fmt.Errorf("unsealing %s: %w", f, err)
		}
		return checkSize(f, key)
	case kf.Clear != nil:
		if k.policy == TPMRequired {
			return nil, fmt.Errorf("%s: %w", f, ErrKeyInClear)
		}
		return checkSize(f, kf.Clear)
	default:
		return nil, fmt.Errorf("%s holds no key", f)
	}
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
	// Get returns the CUK made by New.
	Get() ([]byte, error)
}

// Escrow keeps the CUK on the ESP (esp.ClusterKeyEscrow), sealed exactly
// like the local unlock key. It stands in until the cluster keeps the CUK.
type Escrow struct {
	k keeper
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
func (e Escrow) Get() ([]byte, error) {
	return e.k.load(esp.ClusterKeyEscrow)
}

// ErrKeySealed is returned by ClearKey for a key sealed to a TPM.
var ErrKeySealed = errors.New("the key is sealed to the node's TPM")

// ClearKey returns the key in a key file that holds it in clear, as a node
// without a TPM writes them. It is for recovery on another machine.
func ClearKey(b []byte) ([]byte, error) {
	var kf keyFile
	if err := json.Unmarshal(b, &kf); err != nil {
		return nil, fmt.Errorf("parsing key file: %w", err)
	}
	if kf.Version != keyFileVersion {
		return nil, fmt.Errorf("key file has version %d, want %d", kf.Version, keyFileVersion)
	}
	if kf.isSealed() {
		return nil, ErrKeySealed
	}
	if len(kf.Clear) != crypt.UnlockKeySize {
		return nil, fmt.Errorf("key file holds a %d-byte key, want %d", len(kf.Clear), crypt.UnlockKeySize)
	}
	return kf.Clear, nil
}
