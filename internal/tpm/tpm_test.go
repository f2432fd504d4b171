package tpm

import (
	"crypto/sha256"
	"encoding/binary"
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
// loaded, but for the SRK tp keeps. The simulator has no resource
// manager, so leaks stay visible.
func checkNoHandles(t *testing.T, tp *TPM) {
	t.Helper()
	for _, ht := range []tpm2.TPMHT{tpm2.TPMHTTransient, tpm2.TPMHTHMACSession, tpm2.TPMHTPolicySession} {
		handles, err := loaded(tp.t, ht)
		if err != nil {
			t.Fatalf("listing handles: %v", err)
		}
		left := slices.DeleteFunc(handles, func(h tpm2.TPMHandle) bool { return tp.srk != nil && h == tp.srk.handle })
		if len(left) > 0 {
			t.Errorf("handles left loaded: %#x", left)
		}
	}
}

// loaded lists the TPM's loaded handles of type ht.
func loaded(t transport.TPM, ht tpm2.TPMHT) ([]tpm2.TPMHandle, error) {
	rsp, err := tpm2.GetCapability{
		Capability:    tpm2.TPMCapHandles,
		Property:      uint32(ht) << 24,
		PropertyCount: 16,
	}.Execute(t)
	if err != nil {
		return nil, err
	}
	handles, err := rsp.CapabilityData.Data.Handles()
	if err != nil {
		return nil, err
	}
	return handles.Handle, nil
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

// closeChecker is a transport that lists the transient handles still
// loaded when it is closed.
type closeChecker struct {
	transport.TPMCloser
	left []tpm2.TPMHandle
}

func (c *closeChecker) Close() error {
	left, err := loaded(c.TPMCloser, tpm2.TPMHTTransient)
	if err != nil {
		return err
	}
	c.left = left
	return c.TPMCloser.Close()
}

// TestSRKOnce: seals and unseals create the SRK once between them, and
// Close flushes it.
func TestSRKOnce(t *testing.T) {
	tp := newTPM(t, 1)
	closer := &closeChecker{TPMCloser: tp.t}
	rec := &recorder{TPMCloser: closer}
	tp.t = rec
	values, err := tp.PCRs(DefaultPCRs)
	if err != nil {
		t.Fatal(err)
	}
	epoch, err := tp.Epoch()
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		s, err := tp.SealTo(secret32, values, epoch)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tp.Unseal(s); err != nil {
			t.Fatal(err)
		}
	}
	creates := 0
	for i := 0; i < len(rec.traffic); i += 2 {
		if tpm2.TPMCC(binary.BigEndian.Uint32(rec.traffic[i][6:10])) == tpm2.TPMCCCreatePrimary {
			creates++
		}
	}
	if creates != 1 {
		t.Errorf("two seals and two unseals in an epoch created the SRK %d times, want once", creates)
	}
	if err := tp.Close(); err != nil {
		t.Fatal(err)
	}
	if len(closer.left) > 0 {
		t.Errorf("handles left loaded at Close: %#x", closer.left)
	}
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
