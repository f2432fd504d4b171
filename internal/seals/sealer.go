package seals

import (
	"errors"

	"github.com/borough-os/borough/internal/keyfile"
)

// Sealer seals the node's secrets to its TPM, in the key file format, or
// keeps them in clear without one.
type Sealer struct {
	// Book seals to the node's TPM and remembers the secrets for an
	// update (package seals); nil for no TPM (or a disabled one).
	Book *Book
}

// Seal returns secret as the key file at path.
func (s *Sealer) Seal(path string, secret []byte) ([]byte, error) {
	if s.Book == nil {
		return keyfile.File{Clear: secret}.Marshal()
	}
	return s.Book.Seal(path, secret)
}

// Unseal returns the secret in b, the key file at path. It works until
// the PCRs are capped.
func (s *Sealer) Unseal(path string, b []byte) ([]byte, error) {
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
	if s.Book == nil {
		return nil, errors.New("the key is sealed to a TPM, and this node has none in use")
	}
	return s.Book.Unseal(path, f)
}

// Drop stops resealing the key file at path, which the caller erases
// next, and advances the TPM's epoch, so that no copy of it put back
// unseals again (package seals). Without a TPM it does nothing: the file
// was in clear.
func (s *Sealer) Drop(path string) error {
	if s == nil || s.Book == nil {
		return nil
	}
	return s.Book.Retire(path)
}
