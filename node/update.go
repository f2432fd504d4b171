package main

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

	"github.com/borough-os/borough/internal/cluster"
	"github.com/borough-os/borough/internal/efivar"
	"github.com/borough-os/borough/internal/espledger"
	"github.com/borough-os/borough/internal/measure"
	"github.com/borough-os/borough/internal/payload"
	"github.com/borough-os/borough/internal/seals"
	"github.com/borough-os/borough/internal/storage"
	"github.com/borough-os/borough/internal/supervisor"
	"github.com/borough-os/borough/internal/uki"
	"github.com/borough-os/borough/internal/update"
	"github.com/borough-os/borough/internal/watchdog"
	"github.com/borough-os/borough/proto/nodepb"
)

// A try boot's watchdog resets the machine within watchdogTimeout once
// it stops being fed, which it is until tryDeadline after the node
// started: a new system that has not confirmed itself by then has hung.
const (
	watchdogTimeout = 30 * time.Second
	tryDeadline     = 10 * time.Minute
)

// updater is the node's side of A/B updates (internal/update): which slot
// booted, the try boot of an update, and installing the next one.
type updater struct {
	log     *slog.Logger
	st      *storage.Storage
	running update.Running
	dog     *watchdog.Dog
	// seals seals the node's keys to its TPM; nil without one in use.
	seals *seals.Book
	// ledger keeps the update record, once bringUp has opened it; nil
	// until then (package espledger).
	ledger *espledger.Ledger

	mu      sync.Mutex
	rec     *update.Record
	outcome update.Outcome
}

// startUpdates finds out what this boot is: a normal one, an update's try
// boot (which arms the watchdog), or the old slot after a try boot that
// failed. It reads the update record before the ESP's ledger can check
// it, so that a try boot that hangs early is reset: a forged record arms
// no more than the watchdog, which useLedger disarms once the ledger
// refuses the record.
func startUpdates(log *slog.Logger, st *storage.Storage) *updater {
	u := &updater{log: log, st: st}
	slot, err := update.Booted(efivar.Dir)
	if err != nil {
		log.Warn("assuming boot slot A", "err", err)
	}
	u.running.Slot = slot
	if u.running.Version, err = uki.Version(slot.BootBinary().In(storage.ESPRoot)); err != nil {
		log.Warn("the running version is unknown", "err", err)
	}
	if sha, err := os.ReadFile("/" + payload.Hash); err == nil {
		u.running.PayloadSHA = strings.TrimSpace(string(sha))
	}
	if u.rec, err = update.ReadRecord(espledger.Unauthenticated(storage.ESPRoot)); err != nil {
		log.Warn("ignoring the update record", "err", err)
	}
	u.outcome = update.Decide(u.rec, slot)
	log.Info("boot slot "+string(slot), "version", u.running.Version, "boot", string(u.outcome))
	if u.outcome == update.TryBoot {
		u.armWatchdog()
	}
	return u
}

// useLedger checks the update record against the ESP's ledger, once
// bringUp has opened it: a record the ledger refuses counts as none (and
// a watchdog armed on its word is disarmed). It then records a rollback,
// and keeps the ledger for the records to come.
func (u *updater) useLedger(l *espledger.Ledger) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.ledger = l
	rec, err := update.ReadRecord(l)
	if err != nil {
		u.log.Error("refusing the update record: this boot is a normal one", "err", err)
		rec = nil
	}
	u.rec, u.outcome = rec, update.Decide(rec, u.running.Slot)
	if u.dog != nil && u.outcome != update.TryBoot {
		if err := u.dog.Disarm(); err != nil {
			u.log.Warn("disarming the watchdog", "err", err)
		}
		u.dog = nil
	}
	if u.outcome == update.RollBack {
		u.log.Warn(fmt.Sprintf("the update to %s in slot %s did not confirm itself: rolled back to %s in slot %s",
			rec.NewVersion, rec.Slot, u.running.Version, u.running.Slot))
		if err := update.RecordRollBack(l, rec); err != nil {
			u.log.Warn("recording the rollback", "err", err)
		}
	}
}

func (u *updater) armWatchdog() {
	dog, err := watchdog.Arm(watchdog.Path, watchdogTimeout)
	if err != nil {
		u.log.Warn("the try boot runs without a watchdog: if it hangs, it stays hung until the machine is reset", "err", err)
		return
	}
	u.dog = dog
	u.log.Info("try boot: watchdog armed", "timeout", dog.Timeout(), "deadline", tryDeadline)
	go dog.Keep(time.Now().Add(tryDeadline))
}

// confirmService is, in a try boot, the service that confirms the update
// once the node is healthy; nil in any other boot.
func (u *updater) confirmService(mgr *cluster.Manager) *supervisor.Service {
	if u.outcome != update.TryBoot {
		return nil
	}
	return &supervisor.Service{Name: "update", Run: func(ctx context.Context) error {
		log := supervisor.Logger(ctx)
		for {
			hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err := mgr.Healthy(hctx)
			cancel()
			if err == nil {
				break
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Second):
			}
		}
		if err := update.Confirm(efivar.Dir, u.ledger, u.rec); err != nil {
			return supervisor.Fatal(fmt.Errorf("confirming the update: %w", err))
		}
		u.settle(log)
		if u.dog != nil {
			if err := u.dog.Disarm(); err != nil {
				log.Warn("disarming the watchdog", "err", err)
			}
		}
		u.mu.Lock()
		u.outcome = update.Normal
		u.mu.Unlock()
		log.Info(fmt.Sprintf("update confirmed: slot %s runs %s and boots by default", u.rec.Slot, u.rec.NewVersion))
		return nil
	}}
}

// install installs an update from the node API, if owner signed it, and
// arms its try boot.
func (u *updater) install(req *nodepb.UpdateRequest, owner *x509.Certificate) (*nodepb.UpdateResponse, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.outcome == update.TryBoot {
		return nil, fmt.Errorf("this boot is the try boot of %s, not confirmed yet", u.rec.NewVersion)
	}
	if u.ledger == nil {
		return nil, errors.New("the node has not opened its ESP's ledger, which keeps the update record: it takes no update before its storage")
	}
	part, err := u.st.Disk.ESPPartition()
	if err != nil {
		return nil, err
	}
	rec, err := update.Install(storage.ESPRoot, u.ledger, u.running,
		update.Update{BootBinary: req.GetBootBinary(), Payload: req.GetPayload(), Release: req.GetRelease()}, owner)
	if err != nil {
		return nil, err
	}
	if u.seals != nil {
		pcrs, err := u.predictPCRs(req.GetBootBinary())
		if err != nil {
			return nil, fmt.Errorf("predicting the new boot binary's PCR 4, to seal the keys to it: %w", err)
		}
		if err := u.seals.SealNext(pcrs); err != nil {
			return nil, err
		}
		u.log.Info("keys sealed to the new boot binary too", "files", len(u.seals.Files()), "pcr4", fmt.Sprintf("%x", pcrs[4][:8]))
	}
	if err := update.Arm(efivar.Dir, part, rec); err != nil {
		return nil, err
	}
	u.rec = rec
	return &nodepb.UpdateResponse{Slot: string(rec.Slot), Version: rec.NewVersion}, nil
}

// useSeals makes book the sealer of the node's keys, and checks, off the
// boot path (it reads the whole boot binary), that PCR 4 can be predicted.
func (u *updater) useSeals(book *seals.Book) {
	u.seals = book
	if book != nil {
		go u.checkPCR4()
	}
}

// predictPCRs returns the PCR values a boot of the boot binary next will
// have: this boot's, with PCR 4 replayed from the firmware's event log
// with next in the running boot binary's place. PCRs 7 (Secure Boot) and
// 12 (command line) do not change with the boot binary: an update signed
// with another db key changes PCR 7, cannot unseal, and rolls back.
func (u *updater) predictPCRs(next []byte) (map[uint][]byte, error) {
	log, err := measure.ReadEventLog()
	if err != nil {
		return nil, err
	}
	running, err := os.ReadFile(u.running.Slot.BootBinary().In(storage.ESPRoot))
	if err != nil {
		return nil, err
	}
	if next == nil {
		next = running
	}
	pcr4, err := measure.PredictPCR4(log, running, next)
	if err != nil {
		return nil, err
	}
	pcrs := maps.Clone(u.seals.BootPCRs)
	pcrs[4] = pcr4
	return pcrs, nil
}

// checkPCR4 predicts this boot's PCR 4 as an update predicts a new boot
// binary's, and says whether the prediction holds.
func (u *updater) checkPCR4() {
	pcrs, err := u.predictPCRs(nil)
	if err == nil && !bytes.Equal(pcrs[4], u.seals.BootPCRs[4]) {
		err = fmt.Errorf("predicted %x, the TPM has %x", pcrs[4], u.seals.BootPCRs[4])
	}
	if err != nil {
		u.log.Warn("PCR 4 cannot be predicted from the event log: an update could not seal keys to a new boot binary", "err", err)
		return
	}
	u.log.Info("PCR 4 predicted from the event log and the boot binary matches the TPM's")
}

// settle seals the node's keys to this boot alone, once an update's
// outcome is known.
func (u *updater) settle(log *slog.Logger) {
	if u.seals == nil {
		return
	}
	if err := u.seals.Settle(); err != nil {
		log.Warn("sealing the keys to this boot alone", "err", err)
		return
	}
	log.Info("keys sealed to this boot binary alone", "files", len(u.seals.Files()))
}

// settleLeftovers settles the keys, once storage has unsealed them, in
// the boot after a rollback, and in a normal boot that found files with
// two seals: an update armed but never tried, or a Settle or epoch
// advance that a crash cut short (package seals).
func (u *updater) settleLeftovers() {
	u.mu.Lock()
	outcome := u.outcome
	u.mu.Unlock()
	if outcome == update.RollBack || outcome == update.Normal && u.seals != nil && u.seals.Pending() {
		u.settle(u.log)
	}
}

// describe says where the last update is, for the node API.
func (u *updater) describe() string {
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
