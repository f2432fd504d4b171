package tpm

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/google/go-tpm/tpm2"
)

// DefaultPCRs are the PCRs Borough seals its keys to: 4, the boot
// binary; 7, the Secure Boot state; 12, the kernel command line a boot
// entry passed. The package doc explains the choice. Callers must not
// modify the slice.
var DefaultPCRs = []uint{4, 7, 12}

// pcrMeaning says what a change of a PCR in DefaultPCRs means, for errors.
var pcrMeaning = map[uint]string{
	4:  "the boot binary",
	7:  "the Secure Boot state or keys",
	12: "the kernel command line or credentials a boot entry passed",
}

// capEvent is what Cap extends the PCRs with.
var capEvent = sha256.Sum256([]byte("Borough: unlock keys released; nothing may unseal them again in this boot"))

// Cap extends each of pcrs with a fixed event, so that nothing running
// later in this boot can unseal what was sealed to them: the values a
// secret was sealed to can only come back with a reboot. The firmware's
// event log does not record the event, so replaying it still predicts the
// next boot's values.
func (t *TPM) Cap(pcrs []uint) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := checkPCRs(pcrs); err != nil {
		return fmt.Errorf("capping PCRs: %w", err)
	}
	for _, pcr := range pcrs {
		_, err := tpm2.PCRExtend{
			PCRHandle: tpm2.AuthHandle{Handle: tpm2.TPMHandle(pcr), Auth: tpm2.PasswordAuth(nil)},
			Digests: tpm2.TPMLDigestValues{
				Digests: []tpm2.TPMTHA{{HashAlg: tpm2.TPMAlgSHA256, Digest: capEvent[:]}},
			},
		}.Execute(t.t)
		if err != nil {
			return fmt.Errorf("capping PCR %d: %w", pcr, err)
		}
	}
	return nil
}

// changed names the PCRs whose current values differ from values, with
// what that means, for an error message. The caller holds t.mu.
func (t *TPM) changed(values map[uint][]byte) string {
	pcrs := slices.Sorted(maps.Keys(values))
	current, err := t.pcrs(pcrs)
	if err != nil {
		return "cannot tell which PCR changed: " + err.Error()
	}
	var out []string
	for _, pcr := range pcrs {
		if bytes.Equal(current[pcr], values[pcr]) {
			continue
		}
		what := fmt.Sprintf("PCR %d", pcr)
		if m, ok := pcrMeaning[pcr]; ok {
			what += " (" + m + ")"
		}
		out = append(out, what)
	}
	if len(out) == 0 {
		return "no PCR differs now; the values changed while unsealing"
	}
	return "changed: " + strings.Join(out, ", ")
}

// numPCRs is the number of PCRs the TCG PC Client platform profile
// mandates, PCRs 0 to 23. Borough uses no others.
const numPCRs = 24

// PCRs reads the current SHA-256 values of pcrs.
func (t *TPM) PCRs(pcrs []uint) (map[uint][]byte, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.pcrs(pcrs)
}

// pcrs is PCRs for a caller that holds t.mu.
func (t *TPM) pcrs(pcrs []uint) (map[uint][]byte, error) {
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

// policyDigest computes the policy digest of a session in which, if
// counter (the epoch counter's name) is set, TPM2_PolicyNV found the
// counter equal to epoch, and then TPM2_PolicyPCR succeeded over pcrs
// while they held values. pcrs must be sorted and values must hold a
// SHA-256 digest for each.
//
// TPM 2.0 Part 3, 23.7 (TPM2_PolicyPCR): the TPM hashes the selected PCR
// values concatenated in selection order, which is ascending PCR index
// within a bank, then extends the policy digest with
// TPM_CC_PolicyPCR || pcrs || that hash.
func policyDigest(pcrs []uint, values map[uint][]byte, counter *tpm2.TPM2BName, epoch uint64) ([]byte, error) {
	h := sha256.New()
	for _, pcr := range pcrs {
		h.Write(values[pcr])
	}
	calc, err := tpm2.NewPolicyCalculator(tpm2.TPMAlgSHA256)
	if err != nil {
		return nil, fmt.Errorf("computing PCR policy: %w", err)
	}
	if counter != nil {
		if err := epochPolicy(*counter, epoch, 0).Update(calc); err != nil {
			return nil, fmt.Errorf("computing the epoch policy: %w", err)
		}
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
