// Package updater is the node's side of A/B updates: it finds out what
// this boot is (a normal one, an update's try boot, or the old slot after
// a try boot that failed), keeps a try boot's watchdog fed until its
// deadline, confirms the new system once the node is healthy, and
// installs the next update, sealing the node's keys to the new boot
// binary before arming it.
//
// Package update holds the mechanism (slots, the update record, the
// checks an update passes); this package is the service that runs it on
// a node, with the node's TPM seals, watchdog and ESP ledger. The two are
// apart because the owner's tools use update (package rollout) and must
// not link the node's TPM and storage code.
//
// # Sealing to the next boot binary
//
// The node's keys are sealed to PCRs 4, 7 and 12 (package seals). PCR 4
// measures the boot binary, so before the try boot of a new one the keys
// are sealed a second time to the PCR 4 that binary will give: this
// boot's PCR 4 replayed from the firmware's event log with the new
// binary's Authenticode digest in the running one's place (package
// measure). PCRs 7 (Secure Boot) and 12 (command line) stay: an update
// signed with another db key changes PCR 7, cannot unseal, and rolls
// back. Once the try boot confirms itself, or rolls back, the keys are
// sealed to the boot that runs alone again.
package updater

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/borough-os/borough/esp"
	"github.com/borough-os/borough/internal/efivar"
	"github.com/borough-os/borough/internal/espledger"
	"github.com/borough-os/borough/internal/measure"
	"github.com/borough-os/borough/internal/payload"
	"github.com/borough-os/borough/internal/seals"
	"github.com/borough-os/borough/internal/supervisor"
	"github.com/borough-os/borough/internal/uki"
	"github.com/borough-os/borough/internal/update"
	"github.com/borough-os/borough/internal/watchdog"
)

// A try boot's watchdog resets the machine within WatchdogTimeout once it
// stops being fed, which it is until TryDeadline after the node started:
// a new system that has not confirmed itself by then has hung.
const (
	WatchdogTimeout = 30 * time.Second
	TryDeadline     = 10 * time.Minute
)

// Paths are where the updater finds the machine's state: on a node,
// NodePaths; tests give directories of their own.
type Paths struct {
	// ESP is where the ESP is mounted.
	ESP string
	// EFIVars is efivarfs (package efivar).
	EFIVars string
	// PayloadHash holds the running node payload's SHA-256 (hex).
	PayloadHash string
	// Watchdog is the hardware watchdog's device.
	Watchdog string
	// EventLog is the firmware's TCG event log.
	EventLog string
}

// NodePaths are the node's, given the ESP's mount point.
func NodePaths(esp string) Paths {
	return Paths{ESP: esp, EFIVars: efivar.Dir, PayloadHash: "/" + payload.Hash,
		Watchdog: watchdog.Path, EventLog: measure.EventLog}
}

// Health says whether the node is healthy enough to confirm a try boot:
// nil once it runs and, in a cluster, a quorum answers.
type Health interface {
	Healthy(ctx context.Context) error
}

// Updater is the node's side of A/B updates, once the node has opened its
// ESP's ledger (Boot.Open).
type Updater struct {
	log     *slog.Logger
	paths   Paths
	running update.Running
	// espPartition says which partition the ESP is, for the slots' boot
	// entries.
	espPartition func() (efivar.Partition, error)

	mu  sync.Mutex
	dog *watchdog.Dog
	// seals seals the node's keys to its TPM; nil without one in use.
	seals *seals.Book
	// ledger keeps the update record (package espledger).
	ledger  *espledger.Ledger
	rec     *update.Record
	outcome update.Outcome
}

// Boot is the updater's first step, from the start of the boot: what the
// node runs and, on the update record's word before the ESP's ledger can
// check it, whether this is a try boot. Open takes it to the Updater.
type Boot struct{ u *Updater }

// Start finds out what this boot is, and arms the watchdog in a try boot.
// It reads the update record before the ESP's ledger can check it, so
// that a try boot that hangs early is reset: a forged record arms no
// more than the watchdog, which Open disarms once the ledger refuses the
// record. espPartition says which partition the ESP is.
func Start(log *slog.Logger, paths Paths, espPartition func() (efivar.Partition, error)) *Boot {
	u := &Updater{log: log, paths: paths, espPartition: espPartition}
	slot, err := update.Booted(paths.EFIVars)
	if err != nil {
		log.Warn("assuming boot slot A", "err", err)
	}
	u.running.Slot = slot
	if u.running.Version, err = uki.Version(slot.BootBinary().In(paths.ESP)); err != nil {
		log.Warn("the running version is unknown", "err", err)
	}
	if sha, err := os.ReadFile(paths.PayloadHash); err == nil {
		u.running.PayloadSHA = strings.TrimSpace(string(sha))
	}
	if u.rec, err = update.ReadRecord(espledger.Unauthenticated(paths.ESP)); err != nil {
		log.Warn("ignoring the update record", "err", err)
	}
	u.outcome = update.Decide(u.rec, slot)
	log.Info("boot slot "+string(slot), "version", u.running.Version, "boot", string(u.outcome))
	if u.outcome == update.TryBoot {
		u.armWatchdog()
	}
	return &Boot{u}
}

// Outcome is what this boot is, on the update record's unchecked word.
func (b *Boot) Outcome() update.Outcome { return b.u.Outcome() }

// Running is what this boot runs.
func (b *Boot) Running() update.Running { return b.u.running }

// RightSlot makes a boot the firmware started from the slot the update
// record does not leave to boot (its boot entries lost or reordered: a
// firmware update, a flat CMOS battery) boot the right one: it writes
// the slots' entries again, makes the firmware start the right slot
// next, marks that on the ESP and says which slot the node must reboot
// into. A boot that was redirected once already goes on, saying so,
// rather than reboot in a loop; a boot in the right slot clears the mark.
// It reads the record before the ESP's ledger can check it, and need
// not: it only chooses where to reboot, and the seals still decide what
// opens. "" means boot on.
func (b *Boot) RightSlot() update.Slot {
	u := b.u
	mark := esp.SlotRedirect.In(u.paths.ESP)
	want, known := update.Expected(u.rec)
	booted := u.running.Slot
	if !known || want == booted {
		if err := os.Remove(mark); err != nil && !errors.Is(err, os.ErrNotExist) {
			u.log.Warn("clearing the slot redirect mark", "err", err)
		}
		return ""
	}
	if prev, err := os.ReadFile(mark); err == nil && update.Slot(prev) == want {
		u.log.Error(fmt.Sprintf("the firmware started slot %s again after this node asked it for slot %s: booting on in slot %s", booted, want, booted))
		return ""
	}
	part, err := u.espPartition()
	if err == nil {
		err = update.Redirect(u.paths.EFIVars, part, want)
	}
	if err == nil {
		err = os.WriteFile(mark, []byte(want), 0o600)
	}
	if err != nil {
		u.log.Error(fmt.Sprintf("the firmware started slot %s, but this node runs slot %s, and it cannot make the firmware start it: booting on", booted, want), "err", err)
		return ""
	}
	u.log.Warn(fmt.Sprintf("the firmware started slot %s, but this node runs slot %s (its boot entries were lost or reordered): "+
		"wrote them again, slot %s first; rebooting into it", booted, want, want))
	return want
}

// Open returns the updater, checking the update record against the ESP's
// ledger l, once the node has opened it: a record the ledger refuses
// counts as none (and a watchdog armed on its word is disarmed). It
// records a rollback, and keeps the ledger for the records to come.
// book seals the node's keys (nil: no TPM in use).
func (b *Boot) Open(l *espledger.Ledger, book *seals.Book) *Updater {
	u := b.u
	u.mu.Lock()
	defer u.mu.Unlock()
	u.ledger, u.seals = l, book
	rec, err := update.ReadRecord(l)
	if err != nil {
		u.log.Error("refusing the update record: this boot is a normal one", "err", err)
		rec = nil
	}
	u.rec, u.outcome = rec, update.Decide(rec, u.running.Slot)
	if u.outcome != update.TryBoot {
		u.disarm()
	}
	if u.outcome == update.RollBack {
		u.log.Warn(fmt.Sprintf("the update to %s in slot %s did not confirm itself: rolled back to %s in slot %s",
			rec.NewVersion, rec.Slot, u.running.Version, u.running.Slot))
		if err := update.RecordRollBack(l, rec); err != nil {
			u.log.Warn("recording the rollback", "err", err)
		}
	}
	return u
}

// Running is what this boot runs.
func (u *Updater) Running() update.Running { return u.running }

// Outcome is what this boot is, as far as the updater knows yet.
func (u *Updater) Outcome() update.Outcome {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.outcome
}

func (u *Updater) armWatchdog() {
	dog, err := watchdog.Arm(u.paths.Watchdog, WatchdogTimeout)
	if err != nil {
		u.log.Warn("the try boot runs without a watchdog: if it hangs, it stays hung until the machine is reset", "err", err)
		return
	}
	u.dog = dog
	u.log.Info("try boot: watchdog armed", "timeout", dog.Timeout(), "deadline", TryDeadline)
	go dog.Keep(time.Now().Add(TryDeadline))
}

// disarm stops the watchdog, if one is armed. u.mu is held.
func (u *Updater) disarm() {
	if u.dog == nil {
		return
	}
	if err := u.dog.Disarm(); err != nil {
		u.log.Warn("disarming the watchdog", "err", err)
	}
	u.dog = nil
}

// ConfirmService is, in a try boot, the service that confirms the update
// once h says the node is healthy; nil in any other boot.
func (u *Updater) ConfirmService(h Health) *supervisor.Service {
	if u.Outcome() != update.TryBoot {
		return nil
	}
	return &supervisor.Service{Name: "update", Run: func(ctx context.Context) error {
		if err := awaitHealthy(ctx, h); err != nil {
			return err
		}
		return u.confirm(supervisor.Logger(ctx))
	}}
}

// awaitHealthy returns once h says the node is healthy, asking every
// second.
func awaitHealthy(ctx context.Context, h Health) error {
	for {
		hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := h.Healthy(hctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// confirm makes the try boot's slot the default, seals the keys to it
// alone and stops the watchdog.
func (u *Updater) confirm(log *slog.Logger) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if err := update.Confirm(u.paths.EFIVars, u.ledger, u.rec); err != nil {
		return supervisor.Fatal(fmt.Errorf("confirming the update: %w", err))
	}
	u.settle(log)
	u.disarm()
	u.outcome = update.Normal
	log.Info(fmt.Sprintf("update confirmed: slot %s runs %s and boots by default", u.rec.Slot, u.rec.NewVersion))
	return nil
}

// Install installs up, if owner signed it, and arms its try boot.
func (u *Updater) Install(up update.Update, owner *x509.Certificate) (*update.Record, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.outcome == update.TryBoot {
		return nil, fmt.Errorf("this boot is the try boot of %s, not confirmed yet", u.rec.NewVersion)
	}
	part, err := u.espPartition()
	if err != nil {
		return nil, err
	}
	rec, err := update.Install(u.paths.ESP, u.ledger, u.running, up, owner)
	if err != nil {
		return nil, err
	}
	if u.seals != nil {
		if err := u.sealNext(up.BootBinary); err != nil {
			return nil, err
		}
	}
	if err := update.Arm(u.paths.EFIVars, part, rec); err != nil {
		return nil, err
	}
	u.rec = rec
	return rec, nil
}

// sealNext seals the node's keys to the boot binary next too.
func (u *Updater) sealNext(next []byte) error {
	pcrs, err := u.predictPCRs(u.seals, next)
	if err != nil {
		return fmt.Errorf("predicting the new boot binary's PCR 4, to seal the keys to it: %w", err)
	}
	if err := u.seals.SealNext(pcrs); err != nil {
		return err
	}
	u.log.Info("keys sealed to the new boot binary too", "files", len(u.seals.Files()), "pcr4", fmt.Sprintf("%x", pcrs[4][:8]))
	return nil
}

// predictPCRs returns the PCR values a boot of the boot binary next will
// have: this boot's (as book holds them), with PCR 4 replayed from the
// firmware's event log with next in the running boot binary's place; nil
// next is the running boot binary.
func (u *Updater) predictPCRs(book *seals.Book, next []byte) (map[uint][]byte, error) {
	log, err := os.ReadFile(u.paths.EventLog)
	if err != nil {
		return nil, fmt.Errorf("reading the firmware's event log: %w", err)
	}
	running, err := os.ReadFile(u.running.Slot.BootBinary().In(u.paths.ESP))
	if err != nil {
		return nil, err
	}
	pcr4, err := measure.PredictPCR4(log, running, next)
	if err != nil {
		return nil, err
	}
	pcrs := maps.Clone(book.BootPCRs)
	pcrs[4] = pcr4
	return pcrs, nil
}

// checkAfter is how long the node runs before CheckService checks that
// PCR 4 can be predicted, which reads and hashes the whole boot binary,
// most of a second of a node's one CPU under TCG: a boot spent it while
// bringing the node up, and a node's first seconds of running are its
// cluster's first requests after a restart and the start of its services
// (docs/decisions.md, "The PCR 4 check after the boot").
const checkAfter = 10 * time.Second

// CheckService is, with a TPM in use (Open's book), the service that checks,
// checkAfter once running is closed (the node runs), that this boot's
// PCR 4 can be predicted as an update will predict a new boot binary's; a
// shutdown before then skips the check. Without a TPM it is nil.
func (u *Updater) CheckService(running <-chan struct{}) *supervisor.Service {
	u.mu.Lock()
	book := u.seals
	u.mu.Unlock()
	if book == nil {
		return nil
	}
	return &supervisor.Service{Name: "pcr4-check", Run: func(ctx context.Context) error {
		select {
		case <-ctx.Done():
			return nil
		case <-running:
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(checkAfter):
		}
		u.checkPCR4(book)
		return nil
	}}
}

// checkPCR4 predicts this boot's PCR 4 and says whether the prediction
// holds.
func (u *Updater) checkPCR4(book *seals.Book) {
	if err := u.checkPrediction(book); err != nil {
		u.log.Warn("PCR 4 cannot be predicted from the event log: an update could not seal keys to a new boot binary", "err", err)
		return
	}
	u.log.Info("PCR 4 predicted from the event log and the boot binary matches the TPM's")
}

func (u *Updater) checkPrediction(book *seals.Book) error {
	pcrs, err := u.predictPCRs(book, nil)
	if err != nil {
		return err
	}
	if !bytes.Equal(pcrs[4], book.BootPCRs[4]) {
		return fmt.Errorf("predicted %x, the TPM has %x", pcrs[4], book.BootPCRs[4])
	}
	return nil
}

// settle seals the node's keys to this boot alone, once an update's
// outcome is known. u.mu is held.
func (u *Updater) settle(log *slog.Logger) {
	if u.seals == nil {
		return
	}
	if err := u.seals.Settle(); err != nil {
		log.Warn("sealing the keys to this boot alone", "err", err)
		return
	}
	log.Info("keys sealed to this boot binary alone", "files", len(u.seals.Files()))
}

// SettleLeftovers settles the keys, once storage has unsealed them, in
// the boot after a rollback, and in a normal boot that found files with
// two seals: an update armed but never tried, or a Settle or epoch
// advance that a crash cut short (package seals).
func (u *Updater) SettleLeftovers() {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.outcome == update.RollBack || u.outcome == update.Normal && u.seals != nil && u.seals.Pending() {
		u.settle(u.log)
	}
}

// Describe says where the last update is, for the node API: empty if
// the node has no record of one.
func (u *Updater) Describe() string {
	u.mu.Lock()
	defer u.mu.Unlock()
	switch {
	case u.rec == nil:
		return ""
	case u.outcome == update.TryBoot:
		return fmt.Sprintf("trying %s in slot %s (from %s)", u.rec.NewVersion, u.rec.Slot, u.rec.OldVersion)
	}
	return fmt.Sprintf("%s: %s in slot %s (from %s)", u.rec.State, u.rec.NewVersion, u.rec.Slot, u.rec.OldVersion)
}
