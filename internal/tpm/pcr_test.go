package tpm

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-tpm/tpm2"
)

func TestPCRs(t *testing.T) {
	tp := newTPM(t, 1)
	zero := make([]byte, sha256.Size)
	got, err := tp.PCRs(DefaultPCRs)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[uint][]byte{4: zero, 7: zero, 12: zero}, got); diff != "" {
		t.Errorf("PCRs of a fresh TPM (-want +got):\n%s", diff)
	}

	// Extending sets PCR := SHA-256(PCR || digest).
	digest := extend(t, tp, 7, "db cert")
	want := sha256.Sum256(append(slices.Clone(zero), digest...))
	got, err = tp.PCRs([]uint{7, 16})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[uint][]byte{7: want[:], 16: zero}, got); diff != "" {
		t.Errorf("PCRs after extending PCR 7 (-want +got):\n%s", diff)
	}
}

func TestPCRsRejects(t *testing.T) {
	tp := newTPM(t, 1)
	for _, tc := range []struct {
		name string
		pcrs []uint
		want string
	}{
		{"none", nil, "no PCRs selected"},
		{"out of range", []uint{4, 24}, "PCR 24 out of range"},
		{"duplicate", []uint{7, 4, 7}, "PCR 7 listed twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tp.PCRs(tc.pcrs)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("PCRs(%v) = %v, want an error containing %q", tc.pcrs, err, tc.want)
			}
		})
	}
}

// TestPolicyDigest checks the policy digest computed without a TPM against
// the one a TPM computes in a trial session from the PCRs' current values.
func TestPolicyDigest(t *testing.T) {
	tp := newTPM(t, 1)
	// Make the PCRs differ, so that concatenation order matters.
	for _, pcr := range []uint{0, 4, 7, 16, 23} {
		extend(t, tp, pcr, strings.Repeat("x", int(pcr)))
	}
	for _, pcrs := range [][]uint{{4}, {4, 7}, {0, 4, 7, 16, 23}} {
		t.Run(fmt.Sprint(pcrs), func(t *testing.T) {
			values, err := tp.PCRs(pcrs)
			if err != nil {
				t.Fatal(err)
			}
			got, err := policyDigest(pcrs, values, nil, 0)
			if err != nil {
				t.Fatal(err)
			}

			sess, closeSess, err := tpm2.PolicySession(tp.t, tpm2.TPMAlgSHA256, 16, tpm2.Trial())
			if err != nil {
				t.Fatal(err)
			}
			defer closeSess()
			_, err = tpm2.PolicyPCR{PolicySession: sess.Handle(), Pcrs: selection(pcrs...)}.Execute(tp.t)
			if err != nil {
				t.Fatal(err)
			}
			want, err := tpm2.PolicyGetDigest{PolicySession: sess.Handle()}.Execute(tp.t)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want.PolicyDigest.Buffer) {
				t.Errorf("policyDigest(%v) = %x, TPM computed %x", pcrs, got, want.PolicyDigest.Buffer)
			}
		})
	}
}
