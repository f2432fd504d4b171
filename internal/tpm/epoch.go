package tpm

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/google/go-tpm/tpm2"
)

// epochIndex is the NV index of the node's epoch counter, in the range
// the TCG leaves to the owner.
const epochIndex tpm2.TPMHandle = 0x0130b0b0

// ErrRolledBack says a sealed secret is from an earlier epoch: an older
// copy of its file, put back.
var ErrRolledBack = errors.New("the secret was sealed in an earlier epoch: an older copy was put back")

// epochPublic is the epoch counter's public area: an 8-byte monotonic
// counter that anyone may read and increment with its empty auth value.
// Incrementing it only ever invalidates seals, which is a denial of
// service that whoever holds the machine has anyway; and a counter the
// owner undefines and defines again starts at the highest value any
// counter on the TPM ever had (TPM 2.0 Part 1, 37.7.2), not lower.
func epochPublic(written bool) tpm2.TPMSNVPublic {
	return tpm2.TPMSNVPublic{
		NVIndex: epochIndex,
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
	t.mu.Lock()
	defer t.mu.Unlock()
	name, err := t.epochName()
	if err != nil {
		return 0, err
	}
	return t.readEpoch(name)
}

// Advance increments the epoch counter and returns its new value.
func (t *TPM) Advance() (uint64, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	name, err := t.epochName()
	if err != nil {
		return 0, err
	}
	if err := t.increment(name); err != nil {
		return 0, err
	}
	return t.readEpoch(name)
}

// epochName returns the epoch counter's name, defining and first
// incrementing it (which sets its written attribute, part of the name)
// if it is not there. An index of that number that is not Borough's
// counter is an error: another program uses it.
func (t *TPM) epochName() (tpm2.TPM2BName, error) {
	rsp, err := tpm2.NVReadPublic{NVIndex: epochIndex}.Execute(t.t)
	if errors.Is(err, tpm2.TPMRCHandle) {
		return t.defineEpoch()
	}
	if err != nil {
		return tpm2.TPM2BName{}, fmt.Errorf("reading the epoch counter's NV index %#x: %w", epochIndex, err)
	}
	pub, err := rsp.NVPublic.Contents()
	if err != nil {
		return tpm2.TPM2BName{}, fmt.Errorf("reading the epoch counter's NV index %#x: %w", epochIndex, err)
	}
	if want := epochPublic(true); pub.Attributes != want.Attributes || pub.DataSize != want.DataSize || pub.NameAlg != want.NameAlg {
		return tpm2.TPM2BName{}, fmt.Errorf("the TPM's NV index %#x is not Borough's epoch counter (attributes %+v): "+
			"another program uses it", epochIndex, pub.Attributes)
	}
	return rsp.NVName, nil
}

// defineEpoch defines the epoch counter and increments it once.
func (t *TPM) defineEpoch() (tpm2.TPM2BName, error) {
	_, err := tpm2.NVDefineSpace{
		AuthHandle: tpm2.AuthHandle{Handle: tpm2.TPMRHOwner, Auth: tpm2.PasswordAuth(nil)},
		PublicInfo: tpm2.New2B(epochPublic(false)),
	}.Execute(t.t)
	if err != nil {
		return tpm2.TPM2BName{}, fmt.Errorf("defining the epoch counter at NV index %#x: %w", epochIndex, err)
	}
	pub := epochPublic(false)
	name, err := tpm2.NVName(&pub)
	if err != nil {
		return tpm2.TPM2BName{}, err
	}
	if err := t.increment(*name); err != nil {
		return tpm2.TPM2BName{}, err
	}
	pub = epochPublic(true)
	name, err = tpm2.NVName(&pub)
	if err != nil {
		return tpm2.TPM2BName{}, err
	}
	return *name, nil
}

func (t *TPM) increment(name tpm2.TPM2BName) error {
	_, err := tpm2.NVIncrement{
		AuthHandle: tpm2.AuthHandle{Handle: epochIndex, Name: name, Auth: tpm2.PasswordAuth(nil)},
		NVIndex:    tpm2.NamedHandle{Handle: epochIndex, Name: name},
	}.Execute(t.t)
	if err != nil {
		return fmt.Errorf("incrementing the epoch counter: %w", err)
	}
	return nil
}

func (t *TPM) readEpoch(name tpm2.TPM2BName) (uint64, error) {
	rsp, err := tpm2.NVRead{
		AuthHandle: tpm2.AuthHandle{Handle: epochIndex, Name: name, Auth: tpm2.PasswordAuth(nil)},
		NVIndex:    tpm2.NamedHandle{Handle: epochIndex, Name: name},
		Size:       8,
	}.Execute(t.t)
	if err != nil {
		return 0, fmt.Errorf("reading the epoch counter: %w", err)
	}
	if len(rsp.Data.Buffer) != 8 {
		return 0, fmt.Errorf("reading the epoch counter: %d bytes, want 8", len(rsp.Data.Buffer))
	}
	return binary.BigEndian.Uint64(rsp.Data.Buffer), nil
}

// epochPolicy is TPM2_PolicyNV over the epoch counter, equal to epoch.
func epochPolicy(name tpm2.TPM2BName, epoch uint64, session tpm2.TPMHandle) tpm2.PolicyNV {
	return tpm2.PolicyNV{
		AuthHandle:    tpm2.AuthHandle{Handle: epochIndex, Name: name, Auth: tpm2.PasswordAuth(nil)},
		NVIndex:       tpm2.NamedHandle{Handle: epochIndex, Name: name},
		PolicySession: session,
		OperandB:      tpm2.TPM2BOperand{Buffer: binary.BigEndian.AppendUint64(nil, epoch)},
		Operation:     tpm2.TPMEOEq,
	}
}
