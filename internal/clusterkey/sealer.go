package clusterkey

import (
	"errors"
	"sync"

	"github.com/borough-os/borough/internal/keyfile"
	"github.com/borough-os/borough/internal/tpm"
)

// Sealer seals the node's secrets to its TPM, in the key file format,
// or keeps them in clear without one.
type Sealer struct {
	// TPM is the node's TPM, nil for none (or a disabled one).
	TPM *tpm.TPM
	// BootPCRs are this boot's PCR values from before they were capped:
	// what the next boot's will be.
	BootPCRs map[uint][]byte
	// The TPM takes one command sequence at a time.
	mu sync.Mutex
}

// Seal returns secret as a key file.
func (s *Sealer) Seal(secret []byte) ([]byte, error) {
	if s.TPM == nil {
		return keyfile.File{Clear: secret}.Marshal()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sealed, err := s.TPM.SealTo(secret, s.BootPCRs)
	if err != nil {
		return nil, err
	}
	b, err := sealed.Marshal()
	if err != nil {
		return nil, err
	}
	return keyfile.File{Sealed: b}.Marshal()
}

// Unseal returns the secret in a key file. It works until the PCRs are
// capped.
func (s *Sealer) Unseal(b []byte) ([]byte, error) {
	f, err := keyfile.Parse(b)
	if err != nil {
		return nil, err
	}
	if !f.IsSealed() {
		if len(f.Clear) == 0 {
			return nil, errors.New("the key file holds no key")
		}
		return f.Clear, nil
	}
	if s.TPM == nil {
		return nil, errors.New("the key is sealed to a TPM, and this node has none in use")
	}
	sealed, err := tpm.UnmarshalSealed(f.Sealed)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.TPM.Unseal(sealed)
}
