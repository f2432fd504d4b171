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

// loadedSRK returns the storage root key, the parent of every sealed
// object, in the owner hierarchy, creating it on first use. The key is
// derived from the owner seed and tpm2.ECCSRKTemplate alone, so every
// creation yields the same key until the TPM is cleared: Borough
// recreates it in each boot instead of persisting it in the TPM's NV
// memory. It stays loaded, in one of the TPM's transient slots, until
// Close or the TPM's next reset: a boot unseals four keys (the ledger's,
// the unlock identity's, the escrow key, the local key), and creating the
// key for each, an elliptic-curve key generation and a flush, cost two of
// an unseal's commands. The caller holds t.mu.
func (t *TPM) loadedSRK() (*srk, error) {
	if t.srk != nil {
		return t.srk, nil
	}
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
	t.srk = &srk{handle: rsp.ObjectHandle, name: rsp.Name, public: *pub}
	return t.srk, nil
}
