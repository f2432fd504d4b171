package clusterkey

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/borough-os/borough/esp"
	"github.com/borough-os/borough/internal/espledger"
	"github.com/borough-os/borough/internal/keyfile"
	"github.com/borough-os/borough/internal/seals"
	"github.com/borough-os/borough/internal/storage"
	"github.com/borough-os/borough/internal/tpmtest"
)

// TestOldSealedKeyPutBack plays test (c) of the offline attacker: a copy
// of the sealed cluster unlock key from before the cluster took it, put
// back on the ESP. The node must not open alone with it: it refuses the
// file, erases it, and goes to its peers.
func TestOldSealedKeyPutBack(t *testing.T) {
	tp := tpmtest.New(t, 3)
	pcrs, epoch := tpmtest.BootState(t, tp)
	root := t.TempDir()
	os.MkdirAll(filepath.Dir(esp.CUKEscrow.In(root)), 0o700)
	boot := func() (*Keeper, *bytes.Buffer) {
		book := &seals.Book{TPM: tp, BootPCRs: pcrs, Epoch: epoch}
		var log bytes.Buffer
		return &Keeper{ESPRoot: root, Ledger: espledger.Unauthenticated(root), Local: storage.LocalEscrow(root, keyfile.TPMRequired, book),
			Seals: book, Log: slog.New(slog.NewTextHandler(&log, nil))}, &log
	}

	k, _ := boot()
	cuk, err := k.New()
	if err != nil {
		t.Fatal(err)
	}
	sealed := esp.ClusterKeyEscrow.In(root)
	old, err := os.ReadFile(sealed)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := k.Get(t.Context()); err != nil || !bytes.Equal(got, cuk) {
		t.Fatalf("Get with the sealed key in place = %x, %v", got, err)
	}
	// The cluster takes the key: the escrow is written, the sealed key
	// retired and erased (reconcile).
	if err := os.WriteFile(esp.CUKEscrow.In(root), []byte(`{"version":1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := k.Seals.Retire(sealed); err != nil {
		t.Fatal(err)
	}
	os.Remove(sealed)
	if epoch, err = tp.Epoch(); err != nil {
		t.Fatal(err)
	}

	// The attacker puts the old copy back; the next boot.
	if err := os.WriteFile(sealed, old, 0o600); err != nil {
		t.Fatal(err)
	}
	k, log := boot()
	got, err := k.Get(t.Context())
	if err == nil || bytes.Equal(got, cuk) || !strings.Contains(err.Error(), "the cluster holds this node's unlock key") {
		t.Errorf("Get with an old sealed key put back = %x, %v; want the peers asked", got, err)
	}
	if !strings.Contains(log.String(), "refused "+string(esp.ClusterKeyEscrow)+": it is from an earlier epoch") {
		t.Errorf("the log does not say the file was refused:\n%s", log.String())
	}
	if _, err := os.Stat(sealed); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the old sealed key is still on the ESP: %v", err)
	}
}
