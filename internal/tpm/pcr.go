package tpm

import (
	"crypto/sha256"
	"errors"
	"fmt"

	"github.com/google/go-tpm/tpm2"
)

// DefaultPCRs are the PCRs Borough seals the local unlock key to: 4, the
// boot binary, and 7, the Secure Boot state. The package doc explains the
// choice. Callers must not modify the slice.
var DefaultPCRs = []uint{4, 7}

// numPCRs is the number of PCRs the TCG PC Client platform profile
// mandates, PCRs 0 to 23. Borough uses no others.
const numPCRs = 24

// PCRs reads the current SHA-256 values of pcrs.
func (t *TPM) PCRs(pcrs []uint) (map[uint][]byte, error) {
	if err := checkPCRs(pcrs); err != nil {
		return nil, fmt.Errorf("reading PCRs: %w", err)
	}
	values := make(map[uint][]byte, len(pcrs))
	for _, pcr := range pcrs {
		// One PCR per TPM2_PCR_Read: a read returns at most eight
		// digests, and a single one needs no matching of the reply's
		// selection against the request.
		rsp, err := tpm2.PCRRead{PCRSelectionIn: selection(pcr)}.Execute(t.t)
		if err != nil {
			return nil, fmt.Errorf("reading PCR %d: %w", pcr, err)
		}
		// A TPM without an allocated SHA-256 bank answers with an empty
		// list, not an error.
		d := rsp.PCRValues.Digests
		if len(d) != 1 || len(d[0].Buffer) != sha256.Size {
			return nil, fmt.Errorf("reading PCR %d: TPM returned no SHA-256 value (SHA-256 bank not allocated?)", pcr)
		}
		values[pcr] = d[0].Buffer
	}
	return values, nil
}

// checkPCRs checks that pcrs is a non-empty set of PCRs 0 to 23. Sealing
// to no PCR at all would make a policy any boot satisfies.
func checkPCRs(pcrs []uint) error {
	if len(pcrs) == 0 {
		return errors.New("no PCRs selected")
	}
	seen := make(map[uint]bool, len(pcrs))
	for _, pcr := range pcrs {
		if pcr >= numPCRs {
			return fmt.Errorf("PCR %d out of range 0-%d", pcr, numPCRs-1)
		}
		if seen[pcr] {
			return fmt.Errorf("PCR %d listed twice", pcr)
		}
		seen[pcr] = true
	}
	return nil
}

// selection selects pcrs in the SHA-256 bank. The selection is a bitmap,
// so the order of pcrs does not matter.
func selection(pcrs ...uint) tpm2.TPMLPCRSelection {
	return tpm2.TPMLPCRSelection{
		PCRSelections: []tpm2.TPMSPCRSelection{{
			Hash:      tpm2.TPMAlgSHA256,
			PCRSelect: tpm2.PCClientCompatible.PCRs(pcrs...),
		}},
	}
}

// policyDigest computes the policy digest of a session in which
// TPM2_PolicyPCR succeeded over pcrs while they held values. pcrs must be
// sorted and values must hold a SHA-256 digest for each.
//
// TPM 2.0 Part 3, 23.7 (TPM2_PolicyPCR): the TPM hashes the selected PCR
// values concatenated in selection order, which is ascending PCR index
// within a bank, then extends the policy digest with
// TPM_CC_PolicyPCR || pcrs || that hash.
func policyDigest(pcrs []uint, values map[uint][]byte) ([]byte, error) {
	h := sha256.New()
	for _, pcr := range pcrs {
		h.Write(values[pcr])
	}
	calc, err := tpm2.NewPolicyCalculator(tpm2.TPMAlgSHA256)
	if err != nil {
		return nil, fmt.Errorf("computing PCR policy: %w", err)
	}
	cmd := tpm2.PolicyPCR{
		PcrDigest: tpm2.TPM2BDigest{Buffer: h.Sum(nil)},
		Pcrs:      selection(pcrs...),
	}
	if err := cmd.Update(calc); err != nil {
		return nil, fmt.Errorf("computing PCR policy: %w", err)
	}
	return calc.Hash().Digest, nil
}
