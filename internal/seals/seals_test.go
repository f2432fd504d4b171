package seals

import (
	"bytes"
	"crypto/sha256"
	"maps"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-tpm-tools/simulator"
	"github.com/google/go-tpm/tpm2"
	"github.com/google/go-tpm/tpm2/transport"

	"github.com/borough-os/borough/internal/keyfile"
	"github.com/borough-os/borough/internal/tpm"
)

// machine is a simulated TPM and its transport, for extending PCRs as a
// new boot binary would.
type machine struct {
	tr  transport.TPMCloser
	tpm *tpm.TPM
}

func newMachine(t *testing.T) *machine {
	t.Helper()
	sim, err := simulator.GetWithFixedSeedInsecure(7)
	if err != nil {
		t.Fatalf("starting the TPM simulator: %v", err)
	}
	t.Cleanup(func() { sim.Close() })
	tr := transport.FromReadWriteCloser(sim)
	return &machine{tr: tr, tpm: tpm.New(tr)}
}

func (m *machine) pcrs(t *testing.T) map[uint][]byte {
	t.Helper()
	p, err := m.tpm.PCRs(tpm.DefaultPCRs)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// boot4 extends PCR 4 with digest, as the firmware measures the boot
// binary it starts, and returns the value it predicted for that.
func (m *machine) boot4(t *testing.T, before map[uint][]byte, digest []byte) map[uint][]byte {
	t.Helper()
	next := maps.Clone(before)
	sum := sha256.Sum256(append(append([]byte{}, before[4]...), digest...))
	next[4] = sum[:]
	_, err := tpm2.PCRExtend{
		PCRHandle: tpm2.AuthHandle{Handle: tpm2.TPMHandle(4), Auth: tpm2.PasswordAuth(nil)},
		Digests:   tpm2.TPMLDigestValues{Digests: []tpm2.TPMTHA{{HashAlg: tpm2.TPMAlgSHA256, Digest: digest}}},
	}.Execute(m.tr)
	if err != nil {
		t.Fatal(err)
	}
	return next
}

func readKeyFile(t *testing.T, path string) *keyfile.File {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := keyfile.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestUpdate follows a key file through an update: sealed, sealed again
// for the new boot binary, unsealed by the new boot, settled on it; and
// the old boot binary can no longer unseal it.
func TestUpdate(t *testing.T) {
	m := newMachine(t)
	path := filepath.Join(t.TempDir(), "local-key.sealed")
	secret := bytes.Repeat([]byte{0x5a}, 32)
	old := m.pcrs(t)
	book := &Book{TPM: m.tpm, BootPCRs: old}
	data, err := book.Seal(path, secret)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(path, data, 0o600)

	newBinary := sha256.Sum256([]byte("the new boot binary"))
	predicted := maps.Clone(old)
	sum := sha256.Sum256(append(append([]byte{}, old[4]...), newBinary[:]...))
	predicted[4] = sum[:]
	if err := book.SealNext(predicted); err != nil {
		t.Fatal(err)
	}
	if f := readKeyFile(t, path); !f.HasNext() {
		t.Fatal("SealNext left no seal for the update")
	}
	// A key sealed after SealNext gets both seals too.
	later := filepath.Join(filepath.Dir(path), "escrow-key.sealed")
	data, _ = book.Seal(later, secret)
	os.WriteFile(later, data, 0o600)
	if f := readKeyFile(t, later); !f.HasNext() {
		t.Error("a key sealed while an update is pending has no seal for it")
	}
	// The old boot still unseals (a rollback).
	if got, err := (&Book{TPM: m.tpm, BootPCRs: old}).Unseal(path, readKeyFile(t, path)); err != nil || !bytes.Equal(got, secret) {
		t.Fatalf("the old boot binary's Unseal = %x, %v", got, err)
	}

	// The new boot: PCR 4 as predicted.
	now := m.boot4(t, old, newBinary[:])
	if !bytes.Equal(now[4], predicted[4]) {
		t.Fatal("the simulated boot did not give the predicted PCR 4")
	}
	nb := &Book{TPM: m.tpm, BootPCRs: now}
	for _, p := range []string{path, later} {
		if got, err := nb.Unseal(p, readKeyFile(t, p)); err != nil || !bytes.Equal(got, secret) {
			t.Fatalf("the new boot's Unseal(%s) = %x, %v", p, got, err)
		}
	}
	if err := nb.Settle(); err != nil {
		t.Fatal(err)
	}
	f := readKeyFile(t, path)
	if f.HasNext() {
		t.Error("Settle kept the seal for the update")
	}
	if got, err := (&Book{TPM: m.tpm, BootPCRs: now}).Unseal(path, f); err != nil || !bytes.Equal(got, secret) {
		t.Fatalf("after Settle, Unseal = %x, %v", got, err)
	}
	// Sealed to this boot alone: the replaced binary's values no longer
	// open it.
	s, err := tpm.UnmarshalSealed(f.Sealed)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(s.Values[4], now[4]) {
		t.Errorf("the settled seal is to PCR 4 %x, want this boot's %x", s.Values[4], now[4])
	}
}

func TestUnsealBothFail(t *testing.T) {
	m := newMachine(t)
	path := filepath.Join(t.TempDir(), "k")
	old := m.pcrs(t)
	book := &Book{TPM: m.tpm, BootPCRs: old}
	data, _ := book.Seal(path, []byte("0123456789abcdef0123456789abcdef"))
	os.WriteFile(path, data, 0o600)
	m.boot4(t, old, bytes.Repeat([]byte{1}, 32))
	if _, err := book.Unseal(path, readKeyFile(t, path)); err == nil {
		t.Error("a file sealed to other PCR values unsealed")
	}
	if len(book.Files()) != 1 {
		t.Errorf("Files = %v", book.Files())
	}
}
