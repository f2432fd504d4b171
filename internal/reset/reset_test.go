package reset

import (
	"bytes"
	"crypto/rand"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/borough-os/borough/esp"
	"github.com/borough-os/borough/internal/pki"
	"github.com/borough-os/borough/internal/tpm"
	"github.com/borough-os/borough/internal/tpmtest"
)

// TestErase erases a node with a TPM (the simulator): the data
// partition's header is zeros and the rest untouched; every state file on
// the ESP is gone and the image's files stay; a secret sealed before does
// not unseal after; the mark is gone, last; and the owner who asked is
// on the ESP, for the node to wait for a config from.
func TestErase(t *testing.T) {
	tp := tpmtest.New(t, 11)
	pcrs, epoch := tpmtest.BootState(t, tp)
	sealed, err := tp.SealTo([]byte("a key of the node's old life"), pcrs, epoch)
	if err != nil {
		t.Fatal(err)
	}

	dir, root := t.TempDir(), t.TempDir()
	data := filepath.Join(dir, "data")
	before := make([]byte, headerBytes+1<<20)
	rand.Read(before)
	if err := os.WriteFile(data, before, 0o600); err != nil {
		t.Fatal(err)
	}
	kept := []esp.File{esp.BootBinary, esp.UpdateRecord, esp.RandomSeed}
	for _, f := range append(append([]esp.File{}, state...), kept...) {
		write(t, root, f)
	}
	owner, err := pki.NewOwner("owner", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := Request(root, owner.Cert); err != nil || !Requested(root) {
		t.Fatalf("Request = %v; Requested = %v", err, Requested(root))
	}

	if err := Erase(slog.New(slog.DiscardHandler), data, root, tp); err != nil {
		t.Fatal(err)
	}
	after, err := os.ReadFile(data)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(after[:headerBytes], make([]byte, headerBytes)) || !bytes.Equal(after[headerBytes:], before[headerBytes:]) {
		t.Error("the partition is not its header zeroed and the rest as it was")
	}
	for _, f := range state {
		if _, err := os.Stat(f.In(root)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s is still on the ESP: %v", f, err)
		}
	}
	for _, f := range kept {
		if _, err := os.Stat(f.In(root)); err != nil {
			t.Errorf("%s, the image's, is gone: %v", f, err)
		}
	}
	if _, err := tp.Unseal(sealed); !errors.Is(err, tpm.ErrRolledBack) {
		t.Errorf("a secret sealed before the reset unseals after it: %v", err)
	}
	if Requested(root) {
		t.Error("the reset's mark is still there")
	}
	if b, err := os.ReadFile(esp.ResetOwner.In(root)); err != nil || !bytes.Equal(b, pki.CertPEM(owner.Cert)) {
		t.Errorf("the owner who reset the node, on the ESP: %q, %v", b, err)
	}
}

func write(t *testing.T, root string, f esp.File) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(f.In(root)), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f.In(root), []byte(f), 0o600); err != nil {
		t.Fatal(err)
	}
}
