// Package keyfile is the format of the unlock key files on the ESP and
// the policy that says whether their keys must be sealed to a TPM: the
// sealing layer of the keys' map (docs/keys.md), a leaf that the owner's
// tool and the enrolment config read too.
//
// It is a leaf package so that what only reads or names the format (the
// enrolment config's storage policy, `borough recovery` on another
// machine) does not pull in storage and with it the TPM, device-mapper
// and boot disk code.
package keyfile

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/borough-os/borough/internal/versioned"
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

// Version is the version of File this node writes and reads.
const Version = 1

// KeySize is the size of an unlock key.
const KeySize = 32

// File is how an unlock key is kept on the ESP: sealed to the TPM (a
// tpm.Sealed, encoded), or, without one, in clear.
type File struct {
	Version int             `json:"version"`
	Sealed  json.RawMessage `json:"sealed,omitempty"`
	// Next is the key sealed to the PCR values of an update's boot
	// binary while its try boot is pending (internal/seals).
	Next  json.RawMessage `json:"next,omitempty"`
	Clear []byte          `json:"clear,omitempty"`
}

// IsSealed says whether the file holds a sealed key; a JSON null is none.
func (f File) IsSealed() bool {
	return len(f.Sealed) > 0 && string(f.Sealed) != "null"
}

// HasNext says whether the file also holds a key sealed for an update.
func (f File) HasNext() bool {
	return len(f.Next) > 0 && string(f.Next) != "null"
}

// Marshal encodes f, setting its version.
func (f File) Marshal() ([]byte, error) {
	f.Version = Version
	return json.Marshal(f)
}

// Parse decodes a key file and checks its version.
func Parse(b []byte) (*File, error) {
	return versioned.Decode("key file", b, func(f *File) int { return f.Version }, Version)
}

// ErrKeySealed is returned by ClearKey for a key sealed to a TPM.
var ErrKeySealed = errors.New("the key is sealed to the node's TPM")

// ClearKey returns the key in a key file that holds it in clear, as a node
// without a TPM writes them. It is for recovery on another machine.
func ClearKey(b []byte) ([]byte, error) {
	f, err := Parse(b)
	if err != nil {
		return nil, err
	}
	if f.IsSealed() {
		return nil, ErrKeySealed
	}
	if len(f.Clear) != KeySize {
		return nil, fmt.Errorf("key file holds a %d-byte key, want %d", len(f.Clear), KeySize)
	}
	return f.Clear, nil
}
