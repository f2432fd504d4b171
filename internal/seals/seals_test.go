package seals

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-tpm/tpm2"
	"github.com/google/go-tpm/tpm2/transport"

	"github.com/borough-os/borough/internal/keyfile"
	"github.com/borough-os/borough/internal/tpm"
	"github.com/borough-os/borough/internal/tpmtest"
)

// machine is a simulated TPM and its transport, for extending PCRs as a
// new boot binary would.
type machine struct {
	tr  transport.TPMCloser
	tpm *tpm.TPM
}

func newMachine(t *testing.T) *machine {
	t.Helper()
	tr := tpmtest.Transport(t, 7)
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
	epoch, err := m.tpm.Epoch()
	if err != nil {
		t.Fatal(err)
	}
	book := &Book{TPM: m.tpm, BootPCRs: old, Epoch: epoch}
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
	if got, err := (&Book{TPM: m.tpm, BootPCRs: old, Epoch: epoch}).Unseal(path, readKeyFile(t, path)); err != nil || !bytes.Equal(got, secret) {
		t.Fatalf("the old boot binary's Unseal = %x, %v", got, err)
	}

	// The new boot: PCR 4 as predicted.
	now := m.boot4(t, old, newBinary[:])
	if !bytes.Equal(now[4], predicted[4]) {
		t.Fatal("the simulated boot did not give the predicted PCR 4")
	}
	nb := &Book{TPM: m.tpm, BootPCRs: now, Epoch: epoch}
	for _, p := range []string{path, later} {
		if got, err := nb.Unseal(p, readKeyFile(t, p)); err != nil || !bytes.Equal(got, secret) {
			t.Fatalf("the new boot's Unseal(%s) = %x, %v", p, got, err)
		}
	}
	if !nb.Pending() {
		t.Error("the try boot unsealed files with two seals and is not Pending")
	}
	if err := nb.Settle(); err != nil {
		t.Fatal(err)
	}
	if nb.Epoch != epoch+1 || nb.Pending() {
		t.Errorf("after Settle, epoch %d (want %d), Pending %v", nb.Epoch, epoch+1, nb.Pending())
	}
	f := readKeyFile(t, path)
	if f.HasNext() {
		t.Error("Settle kept the seal for the update")
	}
	if got, err := (&Book{TPM: m.tpm, BootPCRs: now, Epoch: nb.Epoch}).Unseal(path, f); err != nil || !bytes.Equal(got, secret) {
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

// TestAdvance plays an attacker who keeps copies of the key files and
// puts them back after the epoch moved on: a copy of a remembered file,
// and of one the node forgot and erased (a cluster unlock key the cluster
// now holds), no longer unseal; the files as Retire left them do.
func TestAdvance(t *testing.T) {
	m := newMachine(t)
	epoch, err := m.tpm.Epoch()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	local, escrowed := filepath.Join(dir, "local-key.sealed"), filepath.Join(dir, "cluster-key.sealed")
	secret := bytes.Repeat([]byte{0x5a}, 32)
	book := &Book{TPM: m.tpm, BootPCRs: m.pcrs(t), Epoch: epoch}
	copies := map[string][]byte{}
	for _, p := range []string{local, escrowed} {
		data, err := book.Seal(p, secret)
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(p, data, 0o600)
		copies[p] = data
	}
	if err := book.Retire(escrowed); err != nil {
		t.Fatal(err)
	}
	os.Remove(escrowed)
	if book.Epoch != epoch+1 {
		t.Errorf("the book's epoch is %d after Retire, want %d", book.Epoch, epoch+1)
	}
	now := &Book{TPM: m.tpm, BootPCRs: m.pcrs(t), Epoch: book.Epoch}
	f := readKeyFile(t, local)
	if got, err := now.Unseal(local, f); err != nil || !bytes.Equal(got, secret) || f.HasNext() {
		t.Fatalf("the advanced file: Unseal = %x, %v; a second seal: %v", got, err, f.HasNext())
	}
	for p, data := range copies {
		kf, err := keyfile.Parse(data)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := now.Unseal(p, kf); !errors.Is(err, tpm.ErrRolledBack) {
			t.Errorf("a copy of %s from before Retire: Unseal = %v, want %v", filepath.Base(p), err, tpm.ErrRolledBack)
		}
	}
	if now.Pending() {
		t.Error("Pending after unsealing files with one seal each")
	}

	if err := now.SealNext(m.pcrs(t)); err != nil {
		t.Fatal(err)
	}
	if err := now.Retire(local); err == nil || !slices.Contains(now.Files(), local) {
		t.Errorf("Retire while an update is pending = %v, files %v; want refused, the file still remembered", err, now.Files())
	}
	next := &Book{TPM: m.tpm, BootPCRs: m.pcrs(t), Epoch: now.Epoch}
	if _, err := next.Unseal(local, readKeyFile(t, local)); err != nil || !next.Pending() {
		t.Errorf("a file with two seals: Unseal = %v, Pending = %v; want Pending", err, next.Pending())
	}

	// A file sealed by a Borough before epochs wants settling too.
	before := filepath.Join(dir, "before-epochs.sealed")
	data, err := (&Book{TPM: m.tpm, BootPCRs: m.pcrs(t)}).Seal(before, secret)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(before, data, 0o600)
	migrating := &Book{TPM: m.tpm, BootPCRs: m.pcrs(t), Epoch: now.Epoch}
	if _, err := migrating.Unseal(before, readKeyFile(t, before)); err != nil || !migrating.Pending() {
		t.Errorf("a file sealed without an epoch: Unseal = %v, Pending = %v; want Pending", err, migrating.Pending())
	}
}

// TestNilBook: without a TPM, secrets are kept in clear key files.
func TestNilBook(t *testing.T) {
	var s *Book
	secret := bytes.Repeat([]byte{7}, 32)
	b, err := s.Seal("key", secret)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.UnsealFile("key", b)
	if err != nil || !bytes.Equal(got, secret) {
		t.Errorf("UnsealFile(Seal) = %x, %v", got, err)
	}
	for _, tc := range []struct{ name, file, err string }{
		{"sealed", `{"version":1,"sealed":{"version":2}}`, "sealed to a TPM"},
		{"empty", `{"version":1}`, "holds no key"},
	} {
		if _, err := s.UnsealFile("key", []byte(tc.file)); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("UnsealFile of a %s key file without a TPM = %v, want %q", tc.name, err, tc.err)
		}
	}
	if err := s.Retire("key"); err != nil {
		t.Errorf("Retire without a TPM = %v", err)
	}
}
