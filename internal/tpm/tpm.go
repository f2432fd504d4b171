package tpm

import (
	"errors"
	"fmt"
	"io/fs"
	"sync"

	"github.com/google/go-tpm/tpm2"
	"github.com/google/go-tpm/tpm2/transport"
	"github.com/google/go-tpm/tpm2/transport/linuxtpm"
)

var (
	// ErrNoTPM is returned by Open when the machine has no TPM device.
	ErrNoTPM = errors.New("no TPM device")
	// ErrPolicy is returned by Unseal when the current PCR values differ
	// from those the secret was sealed to: the boot binary, its command
	// line or the Secure Boot state changed since sealing.
	ErrPolicy = errors.New("PCR values differ from those sealed to")
	// ErrWrongTPM is returned by Unseal when the TPM refuses to load the
	// sealed object: it was sealed by another TPM, or this TPM was cleared
	// since, which replaced the storage seed the object was bound to. A
	// blob altered on disk fails the same integrity check; the TPM cannot
	// tell these cases apart.
	ErrWrongTPM = errors.New("sealed by another TPM or the TPM was cleared")
)

// TPM is an open TPM. It is safe for concurrent use: each method runs its
// commands and sessions under one lock, as they must not interleave (the
// device takes one command at a time, and /dev/tpm0 holds only a few
// transient objects).
type TPM struct {
	mu sync.Mutex
	t  transport.TPMCloser
	// srk is the storage root key once created (loadedSRK).
	srk *srk
	// probes is Probes.
	probes int
}

// Open opens the machine's TPM, /dev/tpm0 or else /dev/tpmrm0. It returns
// an error wrapping ErrNoTPM when neither exists and the firmware
// describes no TPM, and ErrNotProbed when it describes one that the
// kernel's driver did not take, even when asked again (probe.go);
// devtmpfs and sysfs must be mounted.
func Open() (*TPM, error) {
	return thisMachine.open()
}

// open opens the first of paths that exists.
func open(paths []string) (*TPM, error) {
	for _, path := range paths {
		t, err := linuxtpm.Open(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			// The node exists but does not open (permissions, not a
			// device, busy /dev/tpm0): report it rather than trying a
			// less suitable one.
			return nil, fmt.Errorf("opening TPM: %w", err)
		}
		return New(t), nil
	}
	return nil, fmt.Errorf("opening TPM: %w (tried %v)", ErrNoTPM, paths)
}

// New wraps an open TPM transport, such as a simulator in tests. The TPM
// takes ownership of t: Close closes it.
func New(t transport.TPMCloser) *TPM {
	return &TPM{t: t}
}

// Close flushes the storage root key, if loaded, and closes the TPM
// device.
func (t *TPM) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	var err error
	if t.srk != nil {
		t.flush(t.srk.handle, &err)
		t.srk = nil
	}
	return errors.Join(err, t.t.Close())
}

// flush unloads the transient object or session h. It is meant to be
// deferred and reports its error through errp unless an earlier error is
// already there: without the resource manager, a leaked handle holds one of
// the TPM's few transient slots and makes later commands fail.
func (t *TPM) flush(h tpm2.TPMHandle, errp *error) {
	_, err := tpm2.FlushContext{FlushHandle: h}.Execute(t.t)
	if err != nil && *errp == nil {
		*errp = fmt.Errorf("flushing handle %#x: %w", uint32(h), err)
	}
}
