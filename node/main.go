// Command node is the Borough node process.
//
// Process 1 (init/) starts it from a verified copy of the ESP's node
// binary, once the pseudo-filesystems are mounted, with the garbage
// collector off until the node runs (internal/bootgc). It opens every
// console for the log, which it also keeps in a log tree for the owner's
// node API (and, once the data volume is mounted, in a journal of the last
// boots); reads the kernel command line once; opens the ESP and the TPM;
// starts its supervisor tree with the power button and the signals; then
// brings the node up (the enrolment config, the network, the encrypted
// data volume: internal/storage) and adds the node's services, the
// cluster manager among them, to the tree, which runs until a service
// fails fatally or a power-off or reboot is requested (power button, the
// node API, SIGTERM, or Ctrl-Alt-Del as SIGINT, forwarded by process 1).
// A request during bring-up ends its waits (a node waiting for its
// unlock key powers off when its button is pressed). It then stops the
// services, unmounts storage, syncs, and exits with the code that tells
// process 1 what to do. Which boot slot it runs, and whether this boot is
// an update's try boot, is internal/updater's.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/borough-os/borough/internal/bootgc"
	"github.com/borough-os/borough/internal/cmdline"
	"github.com/borough-os/borough/internal/console"
	"github.com/borough-os/borough/internal/efivar"
	"github.com/borough-os/borough/internal/entropy"
	"github.com/borough-os/borough/internal/hardware"
	"github.com/borough-os/borough/internal/pid1"
	"github.com/borough-os/borough/internal/reset"
	"github.com/borough-os/borough/internal/secureboot"
	"github.com/borough-os/borough/internal/storage"
	"github.com/borough-os/borough/internal/supervisor"
	"github.com/borough-os/borough/internal/timeline"
	"github.com/borough-os/borough/internal/tpm"
	"github.com/borough-os/borough/internal/updater"
)

// roleNode, the first argument, makes this binary the node process.
// Test builds know more roles (testhooks.go).
const roleNode = "node"

// stopTimeout bounds how long services get to stop at shutdown.
const stopTimeout = 10 * time.Second

func main() {
	role := ""
	if len(os.Args) > 1 {
		role = os.Args[1]
	}
	switch {
	case role == roleNode:
		os.Exit(node())
	case testRole(role):
	default:
		fmt.Fprintln(os.Stderr, "node: Borough's init starts this program; there is nothing to do here")
		os.Exit(2)
	}
}

// node runs the node process and returns its exit code for process 1.
func node() int {
	lg := newLogs()
	log := slog.New(console.NewHandler(console.Open(os.Stderr)).WithSink(lg.sink, slog.LevelDebug))
	params, err := cmdline.Read()
	if err != nil {
		return fatal(log, err)
	}
	addTestParams(log, params)
	log.Info("node process started")
	sv := supervise(log)
	defer sv.cancel()
	tl, err := timeline.Load(timeline.File)
	if err != nil {
		log.Warn("the boot timeline will have the node's phases only", "err", err)
	}
	tl.Mark(timeline.Node)
	go func() {
		<-tl.Reached(timeline.Running)
		bootgc.Lift()
	}()
	logSecureBoot(log)
	logLockdown(log)
	hw := reportHardware(log)
	st, err := storage.Open(log.With(console.ServiceKey, "storage"))
	if err != nil {
		return fatal(log, err)
	}
	updates := updater.Start(log.With(console.ServiceKey, "update"), updater.NodePaths(storage.ESPRoot), st.Disk.ESPPartition)
	if slot := updates.RightSlot(); slot != "" {
		return closeAndExit(log, st, pid1.ExitReboot)
	}
	if st.Fresh() {
		if enrolled, err := secureboot.Enrol(storage.ESPRoot, efivar.Dir); err != nil {
			return fatal(log, err)
		} else if enrolled {
			log.Info("enrolled the owner's Secure Boot keys (db, KEK, PK); rebooting into Secure Boot")
			return closeAndExit(log, st, pid1.ExitReboot)
		}
	}
	unbindTPM(log, params)
	t, tpmFailed, err := openTPM(log)
	if err != nil {
		return fatal(log, err)
	}
	if st.Fresh() {
		if _, err := reset.EraseLeftovers(log.With(console.ServiceKey, "reset"), storage.ESPRoot, t); err != nil {
			return fatal(log, err)
		}
	}
	seedEntropy(log.With(console.ServiceKey, "entropy"), t, tl)
	up, err := sv.bringUp(bootEnv{log: log, params: params, st: st, tpm: t, tpmFailed: tpmFailed, hw: hw, timeline: tl, logs: lg,
		updates: updates, requests: sv.requests})
	var stop *stopped
	switch {
	case errors.As(err, &stop):
		return closeAndExit(log, st, stop.code)
	case err == nil && up.reset:
		sv.stop(log)
		if err := reset.Erase(log.With(console.ServiceKey, "reset"), st.Disk.Data, storage.ESPRoot, t); err != nil {
			return fatal(log, err)
		}
		log.Info("reset: the node is erased; rebooting into its first boot")
		return closeAndExit(log, st, pid1.ExitReboot)
	}
	if err := errors.Join(err, capPCRs(log, t)); err != nil {
		return fatal(log, err)
	}
	services := append(testHooks(params, st), up.services...)
	sv.Add(append(services, lg.kernel())...)
	log.Info("node services started", "services", len(services)+1)
	return closeAndExit(log, st, sv.run(log))
}

// closeAndExit unmounts storage, syncs and returns code for process 1.
func closeAndExit(log *slog.Logger, st *storage.Storage, code int) int {
	if err := st.Close(); err != nil {
		log.Warn("unmounting storage", "err", err)
	}
	unix.Sync()
	return code
}

// seedEntropy credits the kernel's pool from the TPM and the ESP's seed
// file and refreshes the seed file. With the pool not ready, that comes
// first: keys, TLS and DHCP wait for it. With it ready (a CPU, firmware or
// device RNG credited it), it waits until the node runs: crediting adds
// to a pool already good, and replacing the seed file waits on the ESP's
// writes (docs/decisions.md, "The entropy seed's write").
func seedEntropy(log *slog.Logger, t *tpm.TPM, tl *timeline.Timeline) {
	if !entropy.Ready() {
		refresh := entropy.Seed(log, storage.ESPRoot, generator(t))
		go refresh()
		return
	}
	go func() {
		<-tl.Reached(timeline.Running)
		entropy.Seed(log, storage.ESPRoot, generator(t))()
	}()
}

// generator is t as the entropy package's generator, nil without a TPM.
func generator(t *tpm.TPM) entropy.Generator {
	if t == nil {
		return nil
	}
	return t
}

// fatal prints the reason the node cannot go on and returns the exit code
// that makes process 1 reboot (or power off).
func fatal(log *slog.Logger, err error) int {
	log.Error("fatal: " + err.Error())
	unix.Sync()
	return pid1.ExitFatal
}

// logSecureBoot says whether the firmware checked the boot binary.
func logSecureBoot(log *slog.Logger) {
	on, err := efivar.SecureBoot(efivar.Dir)
	switch {
	case err != nil:
		log.Warn("Secure Boot state unknown", "err", err)
	case on:
		log.Info("Secure Boot on: the firmware checked the boot binary's signature")
	default:
		setup, _ := efivar.SetupMode(efivar.Dir)
		log.Warn("Secure Boot OFF: the firmware started the boot binary without checking a signature", "setup_mode", setup)
	}
}

// lockdownFile lists the kernel's lockdown modes, the one in force in
// brackets: "none [integrity] confidentiality".
const lockdownFile = "/sys/kernel/security/lockdown"

// logLockdown says which kernel lockdown mode is in force: integrity in
// the release kernel (kernel/borough.config), in which nothing on the
// node, root included, writes kernel memory.
func logLockdown(log *slog.Logger) {
	b, err := os.ReadFile(lockdownFile)
	_, mode, _ := strings.Cut(string(b), "[")
	mode, _, _ = strings.Cut(mode, "]")
	switch {
	case err != nil:
		log.Warn("kernel lockdown state unknown", "err", err)
	case mode == "" || mode == "none":
		log.Warn("kernel lockdown OFF: root on the node can write kernel memory")
	default:
		log.Info("kernel lockdown: " + mode + ": nothing on the node, root included, writes kernel memory")
	}
}

// reportHardware logs the machine's NICs and disks with their drivers,
// and the network and storage controllers no driver took.
func reportHardware(log *slog.Logger) hardware.Report {
	r, err := hardware.Scan("/sys")
	if err != nil {
		log.Warn("reading the hardware report", "err", err)
	}
	r.Log(log)
	if len(r.Disks) == 0 {
		log.Warn("no disks found")
	}
	return r
}

// tree is the node's supervisor tree, started before bring-up with the
// power button and the signals, so that a power request ends any wait of
// bring-up's (for the network, for the cluster unlock key) as it ends the
// running node. requests takes them all, the node API's too.
type tree struct {
	*supervisor.Tree
	requests chan int
	ctx      context.Context
	cancel   context.CancelFunc
	// result is the tree's Run's, once it has stopped.
	result chan error
}

// supervise starts the node's supervisor tree with the power button, and
// watches the signals.
func supervise(log *slog.Logger) *tree {
	ctx, cancel := context.WithCancel(context.Background())
	sv := &tree{Tree: supervisor.New(log, supervisor.Options{}), requests: make(chan int, 1),
		ctx: ctx, cancel: cancel, result: make(chan error, 1)}
	go watchSignals(log, sv.requests)
	sv.Add(powerButton(sv.requests))
	go func() { sv.result <- sv.Run(ctx) }()
	return sv
}

// stopped says a power request, or a service's fatal failure, came before
// bring-up was done; code is the exit code for process 1.
type stopped struct{ code int }

func (s *stopped) Error() string {
	return fmt.Sprintf("stopped during bring-up (exit code %d)", s.code)
}

// bringUp runs bringUp under the tree's context. A power request or a
// fatal service that comes first stops bring-up's waits, and bringUp
// returns a *stopped error.
func (sv *tree) bringUp(b bootEnv) (bringUpResult, error) {
	type result struct {
		up  bringUpResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		up, err := bringUp(sv.ctx, b)
		done <- result{up, err}
	}()
	select {
	case r := <-done:
		return r.up, r.err
	case err := <-sv.result:
		return bringUpResult{}, &stopped{code: fatal(b.log, err)}
	case code := <-sv.requests:
		b.log.Info("stopping bring-up")
		sv.stop(b.log)
		select {
		case <-done:
		case <-time.After(stopTimeout):
			b.log.Warn("bring-up did not stop in time", "timeout", stopTimeout)
		}
		return bringUpResult{}, &stopped{code: code}
	}
}

// run waits until a service fails fatally or a power request comes, and
// returns the exit code for process 1 once the services have stopped.
func (sv *tree) run(log *slog.Logger) int {
	select {
	case err := <-sv.result:
		return fatal(log, err)
	case code := <-sv.requests:
		log.Info("stopping services")
		sv.stop(log)
		return code
	}
}

// stop stops the tree's services, waiting up to stopTimeout.
func (sv *tree) stop(log *slog.Logger) {
	sv.cancel()
	select {
	case <-sv.result:
	case <-time.After(stopTimeout):
		log.Warn("services did not stop in time", "timeout", stopTimeout)
	}
}

// request asks for a shutdown; the first request wins.
func request(requests chan<- int, code int) {
	select {
	case requests <- code:
	default:
	}
}

// watchSignals turns SIGTERM into a power-off and SIGINT (Ctrl-Alt-Del,
// forwarded by process 1) into a reboot.
func watchSignals(log *slog.Logger, requests chan<- int) {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, unix.SIGTERM, unix.SIGINT)
	for s := range sigs {
		if s == unix.SIGINT {
			log.Info("Ctrl-Alt-Del: rebooting")
			request(requests, pid1.ExitReboot)
		} else {
			log.Info("SIGTERM: powering off")
			request(requests, pid1.ExitPoweroff)
		}
	}
}
