package tpm

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/google/go-tpm/tpm2"
)

// Counter is an NV index of a monotonic counter of Borough's, in the
// range the TCG leaves to the owner.
type Counter tpm2.TPMHandle

const (
	// EpochCounter is the node's epoch: every seal names it (SealTo).
	EpochCounter Counter = 0x0130b0b0
	// LedgerCounter counts the writes of the node's ledger of its ESP
	// state (package espledger), so that an older ledger put back shows.
	LedgerCounter Counter = 0x0130b0b1
)

// ErrRolledBack says a sealed secret is from an earlier epoch: an older
// copy of its file, put back.
var ErrRolledBack = errors.New("the secret was sealed in an earlier epoch: an older copy was put back")

// counterPublic is a counter's public area: an 8-byte monotonic counter
// that anyone may read and increment with its empty auth value.
// Incrementing one only ever makes what names its value stale, which is
// a denial of service that whoever holds the machine has anyway; and a
// counter the owner undefines and defines again starts at the highest
// value any counter on the TPM ever had (TPM 2.0 Part 1, 37.7.2), not
// lower.
func counterPublic(c Counter, written bool) tpm2.TPMSNVPublic {
	return tpm2.TPMSNVPublic{
		NVIndex: tpm2.TPMHandle(c),
		NameAlg: tpm2.TPMAlgSHA256,
		Attributes: tpm2.TPMANV{
			NT:        tpm2.TPMNTCounter,
			AuthWrite: true,
			AuthRead:  true,
			NoDA:      true,
			Written:   written,
		},
		DataSize: 8,
	}
}

// Epoch returns the TPM's epoch counter, defining it on first use. A
// secret sealed with an epoch (SealTo) unseals only while the counter
// holds that value: Advance makes every older seal useless, so that a
// key file put back from an older copy of the disk does not open.
func (t *TPM) Epoch() (uint64, error) {
	v, _, err := t.Count(EpochCounter)
	return v, err
}

// Advance increments the epoch counter and returns its new value.
func (t *TPM) Advance() (uint64, error) {
	return t.Increment(EpochCounter)
}

// Count returns counter c's value, defining it if it is not there;
// defined says it was.
func (t *TPM) Count(c Counter) (value uint64, defined bool, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	name, defined, err := t.counterName(c)
	if err != nil {
		return 0, false, err
	}
	value, err = t.readCounter(c, name)
	return value, defined, err
}

// Increment increments counter c and returns its new value.
func (t *TPM) Increment(c Counter) (uint64, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	name, _, err := t.counterName(c)
	if err != nil {
		return 0, err
	}
	if err := t.increment(c, name); err != nil {
		return 0, err
	}
	return t.readCounter(c, name)
}

// counterName returns counter c's name, defining and first incrementing
// it (which sets its written attribute, part of the name) if it is not
// there; defined says it did. An index of that number that is not
// Borough's counter is an error: another program uses it.
func (t *TPM) counterName(c Counter) (name tpm2.TPM2BName, defined bool, err error) {
	rsp, err := tpm2.NVReadPublic{NVIndex: tpm2.TPMHandle(c)}.Execute(t.t)
	if errors.Is(err, tpm2.TPMRCHandle) {
		name, err := t.defineCounter(c)
		return name, err == nil, err
	}
	if err != nil {
		return tpm2.TPM2BName{}, false, fmt.Errorf("reading the public area of counter %#x: %w", uint32(c), err)
	}
	pub, err := rsp.NVPublic.Contents()
	if err != nil {
		return tpm2.TPM2BName{}, false, fmt.Errorf("reading the public area of counter %#x: %w", uint32(c), err)
	}
	if want := counterPublic(c, true); pub.Attributes != want.Attributes || pub.DataSize != want.DataSize || pub.NameAlg != want.NameAlg {
		return tpm2.TPM2BName{}, false, fmt.Errorf("the TPM's NV index %#x is not Borough's counter (attributes %+v): "+
			"another program uses it", uint32(c), pub.Attributes)
	}
	return rsp.NVName, false, nil
}

// defineCounter defines counter c and increments it once.
func (t *TPM) defineCounter(c Counter) (tpm2.TPM2BName, error) {
	_, err := tpm2.NVDefineSpace{
		AuthHandle: tpm2.AuthHandle{Handle: tpm2.TPMRHOwner, Auth: tpm2.PasswordAuth(nil)},
		PublicInfo: tpm2.New2B(counterPublic(c, false)),
	}.Execute(t.t)
	if err != nil {
		return tpm2.TPM2BName{}, fmt.Errorf("defining counter %#x: %w", uint32(c), err)
	}
	pub := counterPublic(c, false)
	name, err := tpm2.NVName(&pub)
	if err != nil {
		return tpm2.TPM2BName{}, err
	}
	if err := t.increment(c, *name); err != nil {
		return tpm2.TPM2BName{}, err
	}
	pub = counterPublic(c, true)
	name, err = tpm2.NVName(&pub)
	if err != nil {
		return tpm2.TPM2BName{}, err
	}
	return *name, nil
}

func (t *TPM) increment(c Counter, name tpm2.TPM2BName) error {
	_, err := tpm2.NVIncrement{
		AuthHandle: tpm2.AuthHandle{Handle: tpm2.TPMHandle(c), Name: name, Auth: tpm2.PasswordAuth(nil)},
		NVIndex:    tpm2.NamedHandle{Handle: tpm2.TPMHandle(c), Name: name},
	}.Execute(t.t)
	if err != nil {
		return fmt.Errorf("incrementing counter %#x: %w", uint32(c), err)
	}
	return nil
}

func (t *TPM) readCounter(c Counter, name tpm2.TPM2BName) (uint64, error) {
	rsp, err := tpm2.NVRead{
		AuthHandle: tpm2.AuthHandle{Handle: tpm2.TPMHandle(c), Name: name, Auth: tpm2.PasswordAuth(nil)},
		NVIndex:    tpm2.NamedHandle{Handle: tpm2.TPMHandle(c), Name: name},
		Size:       8,
	}.Execute(t.t)
	if err != nil {
		return 0, fmt.Errorf("reading counter %#x: %w", uint32(c), err)
	}
	if len(rsp.Data.Buffer) != 8 {
		return 0, fmt.Errorf("reading counter %#x: %d bytes, want 8", uint32(c), len(rsp.Data.Buffer))
	}
	return binary.BigEndian.Uint64(rsp.Data.Buffer), nil
}

// epochPolicy is TPM2_PolicyNV over the epoch counter, equal to epoch.
func epochPolicy(name tpm2.TPM2BName, epoch uint64, session tpm2.TPMHandle) tpm2.PolicyNV {
	return tpm2.PolicyNV{
		AuthHandle:    tpm2.AuthHandle{Handle: tpm2.TPMHandle(EpochCounter), Name: name, Auth: tpm2.PasswordAuth(nil)},
		NVIndex:       tpm2.NamedHandle{Handle: tpm2.TPMHandle(EpochCounter), Name: name},
		PolicySession: session,
		OperandB:      tpm2.TPM2BOperand{Buffer: binary.BigEndian.AppendUint64(nil, epoch)},
		Operation:     tpm2.TPMEOEq,
	}
}
