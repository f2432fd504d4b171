package tpm

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/google/go-tpm/tpm2"
)

// Unseal returns the secret sealed in s. It fails with an error wrapping
// ErrWrongTPM when this TPM's SRK is not the one s was sealed under or the
// TPM cannot load s (sealed by another TPM, or this TPM was cleared
// since), and with one wrapping ErrPolicy, naming the PCRs that changed,
// when the current values of s.PCRs differ from those sealed to.
func (t *TPM) Unseal(s *Sealed) ([]byte, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	secret, err := t.unseal(s)
	if err != nil {
		return nil, fmt.Errorf("unsealing: %w", err)
	}
	return secret, nil
}

// unseal implements Unseal; its named err collects flush errors.
func (t *TPM) unseal(s *Sealed) (_ []byte, err error) {
	pub, priv, err := s.parse()
	if err != nil {
		return nil, err
	}

	srk, err := t.loadedSRK()
	if err != nil {
		return nil, err
	}
	// Checked before the session below is salted to the SRK: a stand-in
	// TPM with an SRK of its own could read a secret salted to its key.
	if s.SRKName != nil && !bytes.Equal(s.SRKName, srk.name.Buffer) {
		return nil, fmt.Errorf("%w: the TPM's storage root key is not the one the secret was sealed under", ErrWrongTPM)
	}
	// The private area is encrypted and integrity-protected with keys
	// derived from the SRK, which derives from the TPM's storage seed. A
	// blob from another TPM, or from before TPM2_Clear replaced the seed,
	// fails the integrity check.
	obj, err := tpm2.Load{
		ParentHandle: tpm2.AuthHandle{
			Handle: srk.handle,
			Name:   srk.name,
			Auth:   tpm2.PasswordAuth(nil),
		},
		InPrivate: *priv,
		InPublic:  *pub,
	}.Execute(t.t)
	if errors.Is(err, tpm2.TPMRCIntegrity) {
		return nil, fmt.Errorf("loading sealed object: %w: %w", ErrWrongTPM, err)
	}
	if err != nil {
		return nil, fmt.Errorf("loading sealed object: %w", err)
	}
	defer t.flush(obj.ObjectHandle, &err)

	// A policy session salted to the SRK; it encrypts the response
	// parameter of Unseal, the secret, on its way back over the bus.
	// The returned closer is not used: the deferred flush does the same.
	sess, _, err := tpm2.PolicySession(t.t, tpm2.TPMAlgSHA256, 16,
		tpm2.Salted(srk.handle, srk.public),
		tpm2.AESEncryption(128, tpm2.EncryptOut))
	if err != nil {
		return nil, fmt.Errorf("starting policy session: %w", err)
	}
	defer t.flush(sess.Handle(), &err)
	if s.Epoch != 0 {
		if err := t.policyEpoch(s.Epoch, sess.Handle()); err != nil {
			return nil, err
		}
	}
	// With an empty PcrDigest, the TPM extends the session's policy with
	// the digest of the PCRs' current values. If they differ from the
	// values sealed to, the session's policy digest differs from the
	// object's AuthPolicy and Unseal fails with TPM_RC_POLICY_FAIL.
	_, err = tpm2.PolicyPCR{
		PolicySession: sess.Handle(),
		Pcrs:          selection(s.PCRs...),
	}.Execute(t.t)
	if err != nil {
		return nil, fmt.Errorf("applying PCR policy: %w", err)
	}
	rsp, err := tpm2.Unseal{
		ItemHandle: tpm2.AuthHandle{
			Handle: obj.ObjectHandle,
			Name:   obj.Name,
			Auth:   sess,
		},
	}.Execute(t.t)
	if errors.Is(err, tpm2.TPMRCPolicyFail) {
		if s.Values != nil {
			return nil, fmt.Errorf("%w (%s): %w", ErrPolicy, t.changed(s.Values), err)
		}
		return nil, fmt.Errorf("%w: %w", ErrPolicy, err)
	}
	if err != nil {
		return nil, err
	}
	return rsp.OutData.Buffer, nil
}

// policyEpoch extends the policy session with the epoch counter's value,
// which must be epoch.
func (t *TPM) policyEpoch(epoch uint64, session tpm2.TPMHandle) error {
	name, _, err := t.counterName(EpochCounter)
	if err != nil {
		return err
	}
	_, err = epochPolicy(name, epoch, session).Execute(t.t)
	if errors.Is(err, tpm2.TPMRCPolicy) {
		now, rerr := t.readCounter(EpochCounter, name)
		return fmt.Errorf("%w (sealed in epoch %d, the TPM is in epoch %d, err %v): %w", ErrRolledBack, epoch, now, rerr, err)
	}
	if err != nil {
		return fmt.Errorf("applying the epoch policy: %w", err)
	}
	return nil
}
