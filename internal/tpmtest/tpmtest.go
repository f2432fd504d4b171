// Package tpmtest gives tests a real TPM 2.0: the reference
// implementation's simulator (go-tpm-tools), not a mock, so that seals,
// policies and NV counters behave as a machine's TPM does.
package tpmtest

import (
	"testing"

	"github.com/google/go-tpm-tools/simulator"
	"github.com/google/go-tpm/tpm2/transport"

	"github.com/borough-os/borough/internal/tpm"
)

// New returns a TPM on a simulator whose seed is seed, closed when t
// ends. The simulator is one per process: New waits until the previous
// one is closed, so tests that use it do not run in parallel.
func New(t testing.TB, seed int64) *tpm.TPM {
	t.Helper()
	return tpm.New(Transport(t, seed))
}

// Transport returns the transport of a simulator whose seed is seed,
// closed when t ends, for a test that sends the TPM commands of its own
// (a PCR extend, as firmware does) or watches what it answers. As with
// New, the simulator is one per process.
func Transport(t testing.TB, seed int64) transport.TPMCloser {
	t.Helper()
	sim, err := simulator.GetWithFixedSeedInsecure(seed)
	if err != nil {
		t.Fatalf("starting the TPM simulator: %v", err)
	}
	t.Cleanup(func() { sim.Close() })
	return transport.FromReadWriteCloser(sim)
}

// BootState returns what a boot seals its keys to on tp: the values of
// tpm.DefaultPCRs and the TPM's epoch.
func BootState(t testing.TB, tp *tpm.TPM) (map[uint][]byte, uint64) {
	t.Helper()
	epoch, err := tp.Epoch()
	if err != nil {
		t.Fatal(err)
	}
	pcrs, err := tp.PCRs(tpm.DefaultPCRs)
	if err != nil {
		t.Fatal(err)
	}
	return pcrs, epoch
}
