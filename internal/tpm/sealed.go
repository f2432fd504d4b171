package tpm

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/go-tpm/tpm2"
)

// sealedVersion is the version of the encoding Marshal writes. Versions
// 1 (no Values, no SRKName) and 2 (no Epoch) are still read.
const sealedVersion = 3

// Sealed is a sealed secret as stored on disk. Only the TPM that sealed it
// can load it, so it need not be kept secret; it must be kept intact.
type Sealed struct {
	// Epoch is the value the TPM's epoch counter must hold for the secret
	// to unseal (TPM.Epoch); 0 for none. Missing before version 3.
	Epoch uint64
	// PCRs are the SHA-256 PCRs the secret is sealed to, in ascending
	// order when made by Seal or SealTo.
	PCRs []uint
	// Values are the PCR values sealed to, so that a failed unseal can
	// say which PCR changed. They are not secret: anyone can read PCRs.
	// Missing in version 1.
	Values map[uint][]byte
	// SRKName is the name of the storage root key the object was sealed
	// under, pinned: Unseal refuses a TPM whose SRK has another name
	// before it sends it anything. Missing in version 1.
	SRKName []byte
	// Public is the sealed object's TPM2B_PUBLIC, as returned by
	// TPM2_Create. It carries the PCR policy.
	Public []byte
	// Private is the sealed object's TPM2B_PRIVATE, as returned by
	// TPM2_Create: the secret, encrypted under the SRK.
	Private []byte
}

// sealedJSON is the on-disk encoding of Sealed. []byte fields are base64.
type sealedJSON struct {
	Version int             `json:"version"`
	Epoch   uint64          `json:"epoch,omitempty"`
	PCRs    []uint          `json:"pcrs"`
	Values  map[uint][]byte `json:"values,omitempty"`
	SRKName []byte          `json:"srk_name,omitempty"`
	Public  []byte          `json:"public"`
	Private []byte          `json:"private"`
}

// Marshal encodes s as JSON, for UnmarshalSealed. It refuses an s that
// UnmarshalSealed would reject.
func (s *Sealed) Marshal() ([]byte, error) {
	if _, _, err := s.parse(); err != nil {
		return nil, fmt.Errorf("encoding sealed secret: %w", err)
	}
	return json.Marshal(sealedJSON{
		Version: sealedVersion,
		Epoch:   s.Epoch,
		PCRs:    s.PCRs,
		Values:  s.Values,
		SRKName: s.SRKName,
		Public:  s.Public,
		Private: s.Private,
	})
}

// UnmarshalSealed decodes what Sealed.Marshal encoded. It checks the
// version, that the PCRs are a non-empty set of PCRs 0 to 23, and that
// the blobs are well-formed TPM2B structures; errors name the bad field.
func UnmarshalSealed(b []byte) (*Sealed, error) {
	var j sealedJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return nil, fmt.Errorf("decoding sealed secret: %w", err)
	}
	if j.Version < 1 || j.Version > sealedVersion {
		return nil, fmt.Errorf("decoding sealed secret: version %d not supported, want 1 to %d", j.Version, sealedVersion)
	}
	if j.Version == 1 && (j.Values != nil || j.SRKName != nil) {
		return nil, errors.New("decoding sealed secret: version 1 has no values or srk_name")
	}
	if j.Version < 3 && j.Epoch != 0 {
		return nil, fmt.Errorf("decoding sealed secret: version %d has no epoch", j.Version)
	}
	s := &Sealed{Epoch: j.Epoch, PCRs: j.PCRs, Values: j.Values, SRKName: j.SRKName, Public: j.Public, Private: j.Private}
	if _, _, err := s.parse(); err != nil {
		return nil, fmt.Errorf("decoding sealed secret: %w", err)
	}
	return s, nil
}

// parse checks s and returns its blobs as TPM structures.
func (s *Sealed) parse() (*tpm2.TPM2BPublic, *tpm2.TPM2BPrivate, error) {
	if err := checkPCRs(s.PCRs); err != nil {
		return nil, nil, fmt.Errorf("pcrs: %w", err)
	}
	if err := s.checkValues(); err != nil {
		return nil, nil, fmt.Errorf("values: %w", err)
	}
	if len(s.Public) == 0 {
		return nil, nil, errors.New("public: empty")
	}
	if len(s.Private) == 0 {
		return nil, nil, errors.New("private: empty")
	}
	pub, err := unmarshalExact[tpm2.TPM2BPublic](s.Public)
	if err == nil {
		_, err = pub.Contents()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("public: not a TPM2B_PUBLIC: %w", err)
	}
	priv, err := unmarshalExact[tpm2.TPM2BPrivate](s.Private)
	if err != nil {
		return nil, nil, fmt.Errorf("private: not a TPM2B_PRIVATE: %w", err)
	}
	return pub, priv, nil
}

// unmarshalExact is tpm2.Unmarshal, which ignores what follows the
// structure, but rejects trailing bytes: they mean b is not what the TPM
// returned.
func unmarshalExact[T tpm2.Marshallable, P interface {
	*T
	tpm2.Unmarshallable
}](b []byte) (*T, error) {
	v, err := tpm2.Unmarshal[T, P](b)
	if err != nil {
		return nil, err
	}
	if n := len(tpm2.Marshal(*v)); n != len(b) {
		return nil, fmt.Errorf("trailing data after byte %d", n)
	}
	return v, nil
}

// checkValues checks that Values, if any, hold a SHA-256 value for each
// PCR in PCRs and nothing else.
func (s *Sealed) checkValues() error {
	if s.Values == nil {
		return nil
	}
	if len(s.Values) != len(s.PCRs) {
		return fmt.Errorf("%d values for %d PCRs", len(s.Values), len(s.PCRs))
	}
	for _, pcr := range s.PCRs {
		if n := len(s.Values[pcr]); n != sha256.Size {
			return fmt.Errorf("PCR %d: %d bytes, want %d", pcr, n, sha256.Size)
		}
	}
	return nil
}
