package tpm

import (
	"fmt"

	"github.com/google/go-tpm/tpm2"
)

// srk is a loaded storage root key.
type srk struct {
	handle tpm2.TPMHandle
	name   tpm2.TPM2BName
	public tpm2.TPMTPublic
}

// createSRK creates the storage root key, the parent of every sealed
// object, in the owner hierarchy. The key is derived from the owner seed
// and tpm2.ECCSRKTemplate alone, so every call yields the same key until
// the TPM is cleared: Borough recreates it instead of persisting it in the
// TPM's NV memory. The caller must flush it.
func (t *TPM) createSRK() (*srk, error) {
	rsp, err := tpm2.CreatePrimary{
		PrimaryHandle: tpm2.TPMRHOwner,
		InPublic:      tpm2.New2B(tpm2.ECCSRKTemplate),
	}.Execute(t.t)
	if err != nil {
		return nil, fmt.Errorf("creating SRK: %w", err)
	}
	pub, err := rsp.OutPublic.Contents()
	if err != nil {
		// err is set, so flush drops its own error: the broken reply is
		// the one to report.
		t.flush(rsp.ObjectHandle, &err)
		return nil, fmt.Errorf("creating SRK: parsing public area: %w", err)
	}
	return &srk{handle: rsp.ObjectHandle, name: rsp.Name, public: *pub}, nil
}
