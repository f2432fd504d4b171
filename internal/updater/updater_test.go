package updater

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/borough-os/borough/esp"
	"github.com/borough-os/borough/internal/efivar"
	"github.com/borough-os/borough/internal/espledger"
	"github.com/borough-os/borough/internal/measure"
	"github.com/borough-os/borough/internal/seals"
	"github.com/borough-os/borough/internal/supervisor"
	"github.com/borough-os/borough/internal/uki"
	"github.com/borough-os/borough/internal/update"
)

var discard = slog.New(slog.DiscardHandler)

// machine is a node's ESP and EFI variables in directories of a test's.
type machine struct {
	paths Paths
}

// newMachine returns a machine that booted slot, with rec as the ESP's
// update record (none if nil).
func newMachine(t *testing.T, slot update.Slot, rec *update.Record) *machine {
	t.Helper()
	m := &machine{paths: Paths{ESP: t.TempDir(), EFIVars: t.TempDir(),
		PayloadHash: filepath.Join(t.TempDir(), "payload.sha256"), Watchdog: filepath.Join(t.TempDir(), "watchdog"),
		EventLog: "../measure/testdata/ovmf-swtpm.eventlog"}}
	entry := map[update.Slot]uint16{update.A: 0xB00A, update.B: 0xB00B}[slot]
	if err := efivar.Write(m.paths.EFIVars, "BootCurrent", efivar.GlobalVariable, efivar.BootVariable,
		binary.LittleEndian.AppendUint16(nil, entry)); err != nil {
		t.Fatal(err)
	}
	if rec != nil {
		b, err := json.Marshal(rec)
		if err != nil {
			t.Fatal(err)
		}
		m.write(t, esp.UpdateRecord, b)
	}
	m.write(t, slot.BootBinary(), []byte("slot "+string(slot)+"'s boot binary"))
	return m
}

func (m *machine) write(t *testing.T, f esp.File, b []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(f.In(m.paths.ESP)), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f.In(m.paths.ESP), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func (m *machine) record(t *testing.T) *update.Record {
	t.Helper()
	rec, err := update.ReadRecord(espledger.Unauthenticated(m.paths.ESP))
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

func (m *machine) start() *Boot {
	return Start(discard, m.paths, func() (efivar.Partition, error) {
		return efivar.Partition{Number: 1, Start: 2048, Size: 262144}, nil
	})
}

// open is the machine's updater once its ESP's ledger (unauthenticated)
// is open, without a TPM.
func (m *machine) open() *Updater {
	return m.start().Open(espledger.Unauthenticated(m.paths.ESP), nil)
}

// trying is the record of an update to 1.1.0 in slot B, not confirmed.
func trying() *update.Record {
	return &update.Record{Version: 1, State: update.Trying, Slot: update.B, From: update.A, NewVersion: "1.1.0", OldVersion: "1.0.0"}
}

// TestBoot: what a boot is, from the slot the firmware started and the
// update record, before and after the ESP's ledger checks the record.
func TestBoot(t *testing.T) {
	for _, tc := range []struct {
		name          string
		booted        update.Slot
		rec           *update.Record
		refused       bool
		first, then   update.Outcome
		describe      string
		recordedState update.State
	}{
		{"no update", update.A, nil, false, update.Normal, update.Normal, "", ""},
		{"the try boot", update.B, trying(), false, update.TryBoot, update.TryBoot,
			"trying 1.1.0 in slot B (from 1.0.0)", update.Trying},
		{"the old slot while trying: a rollback, recorded", update.A, trying(), false, update.RollBack, update.RollBack,
			"rolled-back: 1.1.0 in slot B (from 1.0.0)", update.RolledBack},
		{"a try boot on a record the ledger refuses: a normal boot", update.B, trying(), true, update.TryBoot, update.Normal,
			"", update.Trying},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMachine(t, tc.booted, tc.rec)
			boot := m.start()
			if got := boot.Outcome(); got != tc.first {
				t.Errorf("before the ledger: %q, want %q", got, tc.first)
			}
			if boot.Running().Slot != tc.booted {
				t.Errorf("running slot %s, want %s", boot.Running().Slot, tc.booted)
			}
			ledger := espledger.Unauthenticated(m.paths.ESP)
			if tc.refused {
				ledger = espledger.Refusing(m.paths.ESP, errors.New("a forged ledger"))
			}
			u := boot.Open(ledger, nil)
			if got := u.Outcome(); got != tc.then {
				t.Errorf("after the ledger: %q, want %q", got, tc.then)
			}
			if got := u.Describe(); got != tc.describe {
				t.Errorf("Describe = %q, want %q", got, tc.describe)
			}
			if rec := m.record(t); tc.rec != nil && rec.State != tc.recordedState {
				t.Errorf("the ESP's record is %q, want %q", rec.State, tc.recordedState)
			}
			if svc := u.ConfirmService(new(healthy)); (svc != nil) != (tc.then == update.TryBoot) {
				t.Errorf("a confirm service in a %q boot: %v", tc.then, svc != nil)
			}
		})
	}
}

// healthy is a node that is healthy from the n+1st question on.
type healthy int

func (h *healthy) Healthy(context.Context) error {
	if *h > 0 {
		*h--
		return errors.New("no quorum yet")
	}
	return nil
}

// TestConfirm: a try boot confirms itself once the node is healthy, and
// only then: the new slot boots by default, the record says so, and the
// node takes the next update.
func TestConfirm(t *testing.T) {
	m := newMachine(t, update.B, trying())
	u := m.open()
	h := healthy(1)
	if err := supervisor.RunAlone(context.Background(), discard, *u.ConfirmService(&h)); err != nil {
		t.Fatal(err)
	}
	if h != 0 {
		t.Errorf("confirmed with the node still unhealthy (%d answers left)", h)
	}
	if order, err := efivar.BootOrder(m.paths.EFIVars); err != nil || fmt.Sprint(order) != fmt.Sprint([]uint16{0xB00B, 0xB00A}) {
		t.Errorf("BootOrder = %x, %v; want slot B's entry first", order, err)
	}
	if rec := m.record(t); rec.State != update.Confirmed {
		t.Errorf("record %+v after confirming", rec)
	}
	if got := u.Outcome(); got != update.Normal {
		t.Errorf("outcome after confirming %q", got)
	}
	if _, err := u.Install(update.Update{}, nil); err == nil || strings.Contains(err.Error(), "try boot") {
		t.Errorf("Install after confirming = %v, want the update's own refusal", err)
	}
}

// TestConfirmStopsWithTheNode: a try boot whose node never becomes
// healthy is not confirmed.
func TestConfirmStopsWithTheNode(t *testing.T) {
	m := newMachine(t, update.B, trying())
	u := m.open()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	h := healthy(1)
	if err := supervisor.RunAlone(ctx, discard, *u.ConfirmService(&h)); !errors.Is(err, context.Canceled) {
		t.Errorf("Run = %v, want the context's end", err)
	}
	if rec := m.record(t); rec.State != update.Trying {
		t.Errorf("record %+v, want still trying", rec)
	}
}

// TestInstallRefused: no update is installed in a try boot not yet
// confirmed. (Before the node has opened its ESP's ledger there is no
// Updater to install one: Boot has no Install.)
func TestInstallRefused(t *testing.T) {
	m := newMachine(t, update.B, trying())
	u := m.open()
	if _, err := u.Install(update.Update{}, nil); err == nil || !strings.Contains(err.Error(), "this boot is the try boot of 1.1.0") {
		t.Errorf("Install = %v, want the try boot's refusal", err)
	}
	if _, _, err := efivar.Read(m.paths.EFIVars, "BootNext", efivar.GlobalVariable); !errors.Is(err, efivar.ErrNotFound) {
		t.Errorf("a refused install armed a try boot: %v", err)
	}
}

// TestPrediction: PCR 4 is predicted from the firmware's event log,
// which must hold the running boot binary.
func TestPrediction(t *testing.T) {
	stub, err := os.ReadFile(uki.DebianStub)
	if err != nil {
		t.Fatalf("reading the EFI stub (apt-get install systemd-boot-efi): %v", err)
	}
	running, err := uki.Build(stub, uki.Section{Name: uki.SectionLinux, Data: []byte{1}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		running  []byte
		eventLog string
		want     error
		err      string
	}{
		{"a boot binary the firmware did not start", running, "", measure.ErrNotInLog, ""},
		{"a running boot binary that is no PE image", []byte("slot A"), "", nil, "the running boot binary"},
		{"no event log", running, "none", nil, "reading the firmware's event log"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMachine(t, update.A, nil)
			m.write(t, update.A.BootBinary(), tc.running)
			if tc.eventLog != "" {
				m.paths.EventLog = filepath.Join(t.TempDir(), tc.eventLog)
			}
			_, err := m.open().predictPCRs(nil, nil)
			if tc.want != nil && !errors.Is(err, tc.want) || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Errorf("predictPCRs = %v, want %v %q", err, tc.want, tc.err)
			}
		})
	}
}

// TestCheckServiceStopsWithTheNode: a node that stops before the PCR 4
// check is due, running or not yet, ends the check's service then rather
// than checkAfter later; a node without a TPM has no such service.
func TestCheckServiceStopsWithTheNode(t *testing.T) {
	if svc := newMachine(t, update.A, nil).open().CheckService(make(chan struct{})); svc != nil {
		t.Error("a check service without a TPM in use")
	}
	for _, runs := range []bool{false, true} {
		m := newMachine(t, update.A, nil)
		u := m.start().Open(espledger.Unauthenticated(m.paths.ESP), &seals.Book{})
		running := make(chan struct{})
		if runs {
			close(running)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- supervisor.RunAlone(ctx, discard, *u.CheckService(running)) }()
		cancel()
		select {
		case err := <-done:
			if err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("node running %v: Run = %v", runs, err)
			}
		case <-time.After(checkAfter / 2):
			t.Fatalf("node running %v: the check's service outlived the node", runs)
		}
	}
}

// TestRightSlot: a boot the firmware started from the slot the update
// record does not leave to boot writes the slots' entries again, puts the
// right one first and next, and says to reboot into it, once: a second
// wrong start boots on; a right one clears the mark.
func TestRightSlot(t *testing.T) {
	confirmed := &update.Record{Version: 1, State: update.Confirmed, Slot: update.B, From: update.A}
	rolledBack := &update.Record{Version: 1, State: update.RolledBack, Slot: update.B, From: update.A}
	for _, tc := range []struct {
		name   string
		booted update.Slot
		rec    *update.Record
		want   update.Slot
	}{
		{"no update, slot A", update.A, nil, ""},
		{"no update, slot B", update.B, nil, update.A},
		{"confirmed in B, B booted", update.B, confirmed, ""},
		{"confirmed in B, A booted", update.A, confirmed, update.B},
		{"rolled back to A, B booted", update.B, rolledBack, update.A},
		{"tried in B, A booted: a rollback", update.A, trying(), ""},
		{"tried in B, B booted: its try boot", update.B, trying(), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMachine(t, tc.booted, tc.rec)
			if got := m.start().RightSlot(); got != tc.want {
				t.Fatalf("RightSlot = %q, want %q", got, tc.want)
			}
			if tc.want == "" {
				return
			}
			order, err := efivar.BootOrder(m.paths.EFIVars)
			want := map[update.Slot]uint16{update.A: 0xB00A, update.B: 0xB00B}[tc.want]
			if err != nil || len(order) < 2 || order[0] != want {
				t.Errorf("boot order %x, %v; want %x first", order, err, want)
			}
			_, next, err := efivar.Read(m.paths.EFIVars, "BootNext", efivar.GlobalVariable)
			if err != nil || binary.LittleEndian.Uint16(next) != want {
				t.Errorf("BootNext %x, %v; want %x", next, err, want)
			}
			for _, n := range []uint16{0xB00A, 0xB00B} {
				if _, _, err := efivar.Read(m.paths.EFIVars, efivar.BootEntryName(n), efivar.GlobalVariable); err != nil {
					t.Errorf("boot entry %x: %v", n, err)
				}
			}
			if got := m.start().RightSlot(); got != "" {
				t.Errorf("a second wrong start: RightSlot = %q, want to boot on", got)
			}
			if err := efivar.Write(m.paths.EFIVars, "BootCurrent", efivar.GlobalVariable, efivar.BootVariable,
				binary.LittleEndian.AppendUint16(nil, want)); err != nil {
				t.Fatal(err)
			}
			if got := m.start().RightSlot(); got != "" {
				t.Errorf("the right slot booted: RightSlot = %q", got)
			}
			if _, err := os.Stat(esp.SlotRedirect.In(m.paths.ESP)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the redirect mark after the right slot booted: %v", err)
			}
		})
	}
}
