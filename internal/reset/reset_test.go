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
	"github.com/borough-os/borough/internal/espledger"
	"github.com/borough-os/borough/internal/pki"
	"github.com/borough-os/borough/internal/seals"
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
		if f != esp.LedgerKey && f != esp.Ledger {
			write(t, root, f)
		}
	}
	owner, err := pki.NewOwner("owner", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	l := openLedger(t, tp, root)
	if err := Request(l, owner.Cert); err != nil {
		t.Fatal(err)
	}
	if requested, err := Requested(openLedger(t, tp, root), root); err != nil || !requested {
		t.Fatalf("the next boot: Requested = %v, %v", requested, err)
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
	if _, err := os.Stat(esp.ResetRequest.In(root)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the reset's mark is still there: %v", err)
	}
	if b, err := os.ReadFile(esp.ResetOwner.In(root)); err != nil || !bytes.Equal(b, pki.CertPEM(owner.Cert)) {
		t.Errorf("the owner who reset the node, on the ESP: %q, %v", b, err)
	}
}

// TestOfflineMark plays someone who writes the reset mark on a TPM
// node's ESP with the machine off, naming their own key as the owner to
// wait for: the ledger does not list it, so the node refuses it, removes
// it and erases nothing. A node without a TPM authenticates nothing on
// its ESP, and takes it.
func TestOfflineMark(t *testing.T) {
	attacker, err := pki.NewOwner("attacker", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		tpm  bool
		want bool
	}{
		{"a node with a TPM", true, false},
		{"a node without one", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			l := espledger.Unauthenticated(root)
			if tc.tpm {
				l = openLedger(t, tpmtest.New(t, 12), root)
			}
			if err := os.MkdirAll(filepath.Dir(esp.ResetRequest.In(root)), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(esp.ResetRequest.In(root), pki.CertPEM(attacker.Cert), 0o600); err != nil {
				t.Fatal(err)
			}
			requested, err := Requested(l, root)
			if requested != tc.want || (err != nil) == tc.want {
				t.Fatalf("Requested = %v, %v; want %v", requested, err, tc.want)
			}
			if _, serr := os.Stat(esp.ResetRequest.In(root)); !tc.want && !errors.Is(serr, os.ErrNotExist) {
				t.Errorf("the refused mark is still on the ESP (%v); Requested said %v", serr, err)
			}
		})
	}
}

// TestEraseLeftovers plays a node whose data partition was wiped while
// its ESP kept an earlier life's keys, and a node fresh from its image:
// the first erases the keys and moves the TPM's epoch, keeping its
// enrolment config; the second has nothing to erase and moves nothing.
func TestEraseLeftovers(t *testing.T) {
	for _, tc := range []struct {
		name       string
		leftovers  bool
		wantErased bool
	}{
		{"an earlier life's keys", true, true},
		{"fresh from its image", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tp := tpmtest.New(t, 13)
			pcrs, epoch := tpmtest.BootState(t, tp)
			sealed, err := tp.SealTo([]byte("the earlier life's node key"), pcrs, epoch)
			if err != nil {
				t.Fatal(err)
			}
			root := t.TempDir()
			image := []esp.File{esp.BootBinary, esp.EnrolmentConfig}
			for _, f := range image {
				write(t, root, f)
			}
			if tc.leftovers {
				for _, f := range keys {
					write(t, root, f)
				}
			}
			erased, err := EraseLeftovers(slog.New(slog.DiscardHandler), root, tp)
			if err != nil || erased != tc.wantErased {
				t.Fatalf("EraseLeftovers = %v, %v; want %v", erased, err, tc.wantErased)
			}
			for _, f := range keys {
				if _, err := os.Stat(f.In(root)); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("%s is on the ESP: %v", f, err)
				}
			}
			for _, f := range image {
				if _, err := os.Stat(f.In(root)); err != nil {
					t.Errorf("%s, the image's, is gone: %v", f, err)
				}
			}
			_, err = tp.Unseal(sealed)
			if rolled := errors.Is(err, tpm.ErrRolledBack); rolled != tc.wantErased {
				t.Errorf("unsealing an earlier seal: %v; want the epoch moved: %v", err, tc.wantErased)
			}
		})
	}
}

// openLedger opens the ledger on the ESP at root, as a boot of the node
// with TPM tp does.
func openLedger(t *testing.T, tp *tpm.TPM, root string) *espledger.Ledger {
	t.Helper()
	epoch, err := tp.Epoch()
	if err != nil {
		t.Fatal(err)
	}
	l, err := espledger.Open(root, &seals.Book{TPM: tp, Epoch: epoch}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return l
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
