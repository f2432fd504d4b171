package tpm

import (
	"crypto/sha256"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-tpm-tools/simulator"
	"github.com/google/go-tpm/tpm2"
	"github.com/google/go-tpm/tpm2/transport"
	"github.com/google/go-tpm/tpm2/transport/linuxtpm"
)

// newTPM returns a freshly manufactured simulated TPM, all PCRs zero,
// whose hierarchy seeds derive from seed. Only one simulator can be open
// per process: simulator.Get blocks until the previous one is closed, so
// tests must not call newTPM twice without closing in between. The
// simulator is closed at the end of the test unless the test closed it.
func newTPM(t *testing.T, seed int64) *TPM {
	t.Helper()
	sim, err := simulator.GetWithFixedSeedInsecure(seed)
	if err != nil {
		t.Fatalf("starting TPM simulator: %v", err)
	}
	t.Cleanup(func() {
		if !sim.IsClosed() {
			if err := sim.Close(); err != nil {
				t.Errorf("closing TPM simulator: %v", err)
			}
		}
	})
	return New(transport.FromReadWriteCloser(sim))
}

// extend extends pcr's SHA-256 bank with the SHA-256 digest of data, as
// firmware measures a binary, and returns that digest.
func extend(t *testing.T, tp *TPM, pcr uint, data string) []byte {
	t.Helper()
	digest := sha256.Sum256([]byte(data))
	_, err := tpm2.PCRExtend{
		PCRHandle: tpm2.AuthHandle{
			Handle: tpm2.TPMHandle(pcr),
			Auth:   tpm2.PasswordAuth(nil),
		},
		Digests: tpm2.TPMLDigestValues{
			Digests: []tpm2.TPMTHA{{HashAlg: tpm2.TPMAlgSHA256, Digest: digest[:]}},
		},
	}.Execute(tp.t)
	if err != nil {
		t.Fatalf("extending PCR %d: %v", pcr, err)
	}
	return digest[:]
}

// checkNoHandles fails the test if a transient object or a session is left
// loaded. The simulator has no resource manager, so leaks stay visible.
func checkNoHandles(t *testing.T, tp *TPM) {
	t.Helper()
	for _, ht := range []tpm2.TPMHT{tpm2.TPMHTTransient, tpm2.TPMHTHMACSession, tpm2.TPMHTPolicySession} {
		rsp, err := tpm2.GetCapability{
			Capability:    tpm2.TPMCapHandles,
			Property:      uint32(ht) << 24,
			PropertyCount: 16,
		}.Execute(tp.t)
		if err != nil {
			t.Fatalf("listing handles: %v", err)
		}
		handles, err := rsp.CapabilityData.Data.Handles()
		if err != nil {
			t.Fatalf("listing handles: %v", err)
		}
		if len(handles.Handle) > 0 {
			t.Errorf("handles left loaded: %#x", handles.Handle)
		}
	}
}

// recorder is a transport that keeps every command and response.
type recorder struct {
	transport.TPMCloser
	traffic [][]byte
}

func (r *recorder) Send(cmd []byte) ([]byte, error) {
	// Copy the command before sending: the simulator decrypts encrypted
	// parameters in place, in the caller's buffer.
	r.traffic = append(r.traffic, slices.Clone(cmd))
	rsp, err := r.TPMCloser.Send(cmd)
	r.traffic = append(r.traffic, slices.Clone(rsp))
	return rsp, err
}

func TestOpen(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing")
	for _, tc := range []struct {
		name  string
		paths []string
		want  error
	}{
		{"no device", []string{missing, missing + "2"}, ErrNoTPM},
		{"not a device", []string{missing, file}, linuxtpm.ErrFileIsNotDevice},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := open(tc.paths)
			if !errors.Is(err, tc.want) {
				t.Errorf("open(%v) = %v, want %v", tc.paths, err, tc.want)
			}
		})
	}
}
