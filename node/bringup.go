package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/borough-os/borough/esp"
	"github.com/borough-os/borough/internal/cluster"
	"github.com/borough-os/borough/internal/clusterkey"
	"github.com/borough-os/borough/internal/cmdline"
	"github.com/borough-os/borough/internal/console"
	"github.com/borough-os/borough/internal/enrolment"
	"github.com/borough-os/borough/internal/espledger"
	"github.com/borough-os/borough/internal/hardware"
	"github.com/borough-os/borough/internal/keyfile"
	"github.com/borough-os/borough/internal/lifecycle"
	"github.com/borough-os/borough/internal/netconfig"
	"github.com/borough-os/borough/internal/network"
	"github.com/borough-os/borough/internal/pid1"
	"github.com/borough-os/borough/internal/reset"
	"github.com/borough-os/borough/internal/seals"
	"github.com/borough-os/borough/internal/storage"
	"github.com/borough-os/borough/internal/supervisor"
	"github.com/borough-os/borough/internal/timeline"
	"github.com/borough-os/borough/internal/timesync"
	"github.com/borough-os/borough/internal/tpm"
	"github.com/borough-os/borough/internal/updater"
)

// bootEnv is what bringUp works with.
type bootEnv struct {
	log    *slog.Logger
	params cmdline.Params
	st     *storage.Storage
	tpm    *tpm.TPM
	// tpmFailed is why the machine's TPM is not in tpm (openTPM).
	tpmFailed error
	hw        hardware.Report
	timeline  *timeline.Timeline
	logs      *logs
	// updates is the updater's first step, which bring-up takes to the
	// updater once the ESP's ledger is open.
	updates *updater.Boot
	// requests takes the node API's reboot and power-off requests.
	requests chan<- int
}

// bringUpResult is what a bring-up that was not fatal leaves the node to
// run.
type bringUpResult struct {
	// services are the node's services: all of them once it is up; the
	// network and the node API after a failure with the network up, so
	// that the owner can read why; none after a failure before it.
	services []supervisor.Service
	// failure is why the node failed, nil if it is up.
	failure error
	// reset says the node's owner asked it to erase itself (package
	// reset), as its ledger lists: nothing else was brought up.
	reset bool
}

// bringUp reads the enrolment config, brings up the network, checks a
// join ticket with the cluster, mounts the data volume, and returns the
// node's services. A bad enrolment config, network or ticket puts the
// node in Failed before the data partition is touched. An error is
// fatal. ctx is the node's: it ends bring-up's waits at a power request,
// and the services bring-up starts on the way (the network trial's watch,
// the unlock responder) with the node.
func bringUp(ctx context.Context, b bootEnv) (bringUpResult, error) {
	life := lifecycle.Start(b.log)
	out, err := bringUpWith(ctx, b, life)
	if err == nil && out.failure != nil {
		life.Fail(out.failure)
	}
	return out, err
}

// bringUpWith is bringUp with the node's lifecycle, which its node API
// reads from the start and the cluster manager moves once the data volume
// is mounted.
func bringUpWith(ctx context.Context, b bootEnv, life *lifecycle.Lifecycle) (bringUpResult, error) {
	log, params, st, t, hw, tl := b.log, b.params, b.st, b.tpm, b.hw, b.timeline
	enrol, err := enrolment.Load(log, storage.ESPRoot, st.Fresh())
	if err != nil {
		return bringUpResult{failure: err}, nil
	}
	logEnrolment(log, enrol)
	policy, book, ledger, err := openSeals(log, t, enrol)
	if err != nil {
		return bringUpResult{}, err
	}
	updates := b.updates.Open(ledger, book)
	if requested, err := reset.Requested(ledger, storage.ESPRoot); err != nil {
		log.Error("reset: " + err.Error() + ": only the node writes its reset mark, when its owner asks (borough node reset)")
	} else if requested {
		return bringUpResult{reset: true}, nil
	}
	settings, err := netconfig.Load(log.With(console.ServiceKey, "network"), ledger, enrol)
	if err != nil {
		return bringUpResult{}, err
	}
	net, err := network.Up(ctx, log.With(console.ServiceKey, "network"), settings.Interfaces,
		&network.Leases{Path: esp.DHCPLeases.In(storage.ESPRoot)})
	if err != nil {
		rollBackIfTrial(log, settings, b.requests)
		return bringUpResult{failure: fmt.Errorf("bringing up the network: %w", withoutDrivers(err, hw))}, nil
	}
	tl.Mark(timeline.Network)
	var ph atomic.Pointer[phase]
	ph.Store(&phase{enrolment: enrol})
	healthy := func(ctx context.Context) error {
		if mgr := ph.Load().mgr; mgr != nil {
			return mgr.Healthy(ctx)
		}
		return errNotMounted
	}
	go settings.Watch(ctx, log.With(console.ServiceKey, "network"), netconfig.Window, healthy,
		func() { request(b.requests, pid1.ExitReboot) })
	api := apiService(apiParts{phase: &ph, life: life, logs: b.logs, requests: b.requests, ledger: ledger,
		about:   nodeFacts{hw: hw, timeline: tl, tpm: t != nil, updates: updates},
		network: settings.Propose, fresh: st.Fresh()})
	failed := []supervisor.Service{{Name: "network", Run: net.Run}, api}
	if enrol.AwaitsConfig {
		return bringUpResult{services: failed, failure: errors.New("reset by its owner, " + enrol.OwnerName() +
			": waiting for an enrolment config (borough node enrol, or in fw_cfg or on the ESP)")}, nil
	}
	ntpServers := settings.NTPServers
	if len(ntpServers) == 0 {
		ntpServers = net.NTPServers()
	}
	// Before anything makes or checks a certificate.
	timesync.Once(log.With(console.ServiceKey, "time"), ntpServers)
	if st.Fresh() {
		if err := enrol.CheckClock(time.Now()); err != nil {
			return bringUpResult{services: failed, failure: fmt.Errorf("enrolment config from %s: %w", enrol.Source, err)}, nil
		}
	}
	if err := cluster.Preflight(ctx, log, storage.ESPRoot, enrol); err != nil {
		return bringUpResult{services: failed, failure: err}, nil
	}
	keys := clusterKeys(ctx, log, keeperParts{book: book, ledger: ledger, policy: policy, ip: net.IP,
		giveUp: settings.Expired(), whileLocked: func(ctx context.Context) {
			log.Info("serving the node API while the data volume is locked: its owner can unlock it (borough node unlock)")
			if err := supervisor.RunAlone(ctx, log, api); err != nil && ctx.Err() == nil {
				log.Warn("the node API while the data volume is locked", "err", err)
			}
		}})
	ph.Store(ph.Load().next(func(p *phase) { p.keys = keys }))
	if enrol, err = mountData(ctx, b, enrol, keys, mountParts{policy: policy, book: book, ledger: ledger, updates: updates}); err != nil {
		return bringUpResult{}, err
	}
	ph.Store(ph.Load().next(func(p *phase) { p.enrolment, p.mounted = enrol, true }))
	if err := netconfig.Confirm(ledger, enrol); err != nil {
		log.Warn("the next boot brings up the network of the ESP's enrolment config", "err", err)
	}
	m := cluster.New(log, cluster.Config{
		Enrolment: enrol, FreshData: st.FirstBoot, IP: net.IP,
		ESPRoot: storage.ESPRoot, DataRoot: storage.DataRoot, Ledger: ledger,
		Pause: pauseHook(log, params, "join"), Keys: keys, Timeline: tl,
		VolumeSize: volumeSize(log, params),
	}, life)
	ph.Store(ph.Load().next(func(p *phase) { p.mgr = m }))
	exposeToRogue(m)
	services := append(failed, b.logs.journalService(),
		supervisor.Service{Name: "time", Run: func(ctx context.Context) error {
			return timesync.Run(ctx, supervisor.Logger(ctx), ntpServers)
		}},
		supervisor.Service{Name: "cluster", Run: m.Run},
	)
	if check := updates.CheckService(tl.Reached(timeline.Running)); check != nil {
		services = append(services, *check)
	}
	if confirm := updates.ConfirmService(m); confirm != nil {
		services = append(services, *confirm)
	}
	return bringUpResult{services: services}, nil
}

// mountData unlocks the data volume with the keys p.book unseals under
// p.policy and the cluster unlock key keys gets, mounts it, and returns the
// enrolment config the volume confirms, which the node runs from. It
// checks the ESP ledger's key against the volume, and settles keys an
// update or a crash left sealed twice.
func mountData(ctx context.Context, b bootEnv, enrol *enrolment.Enrolment, keys *clusterkey.Keeper, p mountParts) (*enrolment.Enrolment, error) {
	log := b.log
	if err := b.st.MountData(ctx, storage.Config{
		TPM:         b.tpm,
		TPMFailed:   b.tpmFailed,
		Seals:       p.book,
		Policy:      p.policy,
		ClusterKeys: keys,
		LocalKey:    keys.SetLocalKey,
		Pause:       pauseHook(log, b.params, "storage"),
	}); err != nil {
		return nil, err
	}
	b.timeline.Mark(timeline.Storage)
	confirmed, err := confirmEnrolment(log, enrol, p.policy)
	if err != nil {
		return nil, err
	}
	if err := p.ledger.Confirm(storage.DataRoot); err != nil {
		return nil, fmt.Errorf("checking the ESP ledger's key against the data volume: %w", err)
	}
	p.updates.SettleLeftovers()
	if err := testMarker(log, b.params); err != nil {
		return nil, err
	}
	return confirmed, nil
}

// mountParts are what bring-up opened before the data volume, for
// mountData: the storage policy and the seals the node's keys are under,
// the ESP's ledger, and the updater, which settles keys an update or a
// crash left sealed twice.
type mountParts struct {
	policy  keyfile.TPMPolicy
	book    *seals.Book
	ledger  *espledger.Ledger
	updates *updater.Updater
}

// rollBackIfTrial reboots a node whose network failed on a trial of the
// owner's settings: its next boot goes back to the ones it had.
func rollBackIfTrial(log *slog.Logger, s *netconfig.Settings, requests chan<- int) {
	if s.Trial {
		log.Warn("the owner's new network does not come up: rebooting onto the network the node had")
		request(requests, pid1.ExitReboot)
	}
}

// openSeals returns the storage policy the node's keys are sealed under
// and what seals them to its TPM (package seals), and opens the ESP's
// ledger (package espledger), which authenticates the node's own state on
// the ESP, its network settings among it: both before the network.
func openSeals(log *slog.Logger, t *tpm.TPM, enrol *enrolment.Enrolment) (keyfile.TPMPolicy, *seals.Book, *espledger.Ledger, error) {
	policy := enrol.StoragePolicy
	if enrol.Provisional() {
		policy = storage.KeyPolicy(storage.ESPRoot, policy)
	}
	book, err := sealBook(log, t, policy)
	if err != nil {
		return 0, nil, nil, err
	}
	return policy, book, openLedger(log, book), nil
}

// confirmEnrolment matches the enrolment record Load read from the ESP to
// the data volume's, now mounted, and returns the config the node runs
// from: a forged ESP record is refused and repaired (package enrolment).
// The keys were unlocked under policy, how the ESP keeps them; the
// confirmed storage policy must not require more.
func confirmEnrolment(log *slog.Logger, enrol *enrolment.Enrolment, policy keyfile.TPMPolicy) (*enrolment.Enrolment, error) {
	confirmed, err := enrolment.Confirm(log, enrol, storage.ESPRoot, storage.DataRoot)
	if err != nil {
		return nil, err
	}
	if err := storage.CheckPolicy(confirmed.StoragePolicy, policy); err != nil {
		return nil, err
	}
	if enrol.Provisional() {
		log.Info("enrolment record confirmed by the data volume", "owner", confirmed.OwnerName(),
			"storage_policy", confirmed.StoragePolicy.String())
	}
	return confirmed, nil
}

// withoutDrivers adds the network controllers without a driver to a
// network that found no link: most likely the reason.
func withoutDrivers(err error, hw hardware.Report) error {
	unbound := hw.UnboundNetwork()
	if !errors.Is(err, network.ErrNoLink) || len(unbound) == 0 {
		return err
	}
	return fmt.Errorf("%w; this kernel has no driver for the network controllers %s", err, hardware.Describe(unbound))
}

func logEnrolment(log *slog.Logger, e *enrolment.Enrolment) {
	if e.AwaitsConfig {
		log.Info("no enrolment config: the node was reset by its owner, and waits for one from it", "owner", e.OwnerName())
		return
	}
	if e.Unconfigured() {
		log.Warn("no enrolment config (fw_cfg or ESP): bootstrapping cluster " + e.ClusterName +
			" with NO OWNER; only this node's local clients can reach it")
		return
	}
	mode := "bootstrap"
	if e.Ticket != nil {
		mode = "join"
	}
	log.Info("enrolment config", "source", e.Source, "cluster", e.ClusterName, "mode", mode, "owner", e.OwnerName(),
		"storage_policy", e.StoragePolicy.String(), "provisional", e.Provisional())
}

// openTPM opens the machine's TPM; it returns nil if there is none. A
// TPM the kernel did not bring up is none until the storage policy
// decides (storage.Config.TPMFailed): failed says why.
func openTPM(log *slog.Logger) (t *tpm.TPM, failed, err error) {
	t, err = tpm.Open()
	switch {
	case errors.Is(err, tpm.ErrNoTPM):
		log.Info("no TPM found")
		return nil, nil, nil
	case errors.Is(err, tpm.ErrNotProbed):
		log.Error("the machine's TPM is not in use: the data volume opens only under a storage policy that disables the TPM", "err", err)
		return nil, err, nil
	case err != nil:
		return nil, nil, fmt.Errorf("opening the TPM: %w", err)
	}
	if n := t.Probes(); n > 0 {
		log.Warn("TPM 2.0 found once the kernel was asked to probe it again: its driver had not taken it at boot (the kernel's log says why)", "probes", n)
	} else {
		log.Info("TPM 2.0 found")
	}
	return t, nil, nil
}

// sealBook returns what seals the node's keys to its TPM (package seals),
// to this boot's PCR values from before they are capped and the TPM's
// epoch; nil without a TPM in use.
func sealBook(log *slog.Logger, t *tpm.TPM, policy keyfile.TPMPolicy) (*seals.Book, error) {
	if t == nil || policy == keyfile.TPMDisabled {
		return nil, nil
	}
	pcrs, err := t.PCRs(tpm.DefaultPCRs)
	if err != nil {
		return nil, err
	}
	epoch, err := t.Epoch()
	if err != nil {
		return nil, err
	}
	log.Info("TPM epoch: keys sealed in an earlier one do not unseal", "epoch", epoch)
	return &seals.Book{TPM: t, BootPCRs: pcrs, Epoch: epoch}, nil
}

// openLedger opens the ledger that authenticates the node's state on its
// ESP (package espledger); without a TPM in use, one that checks nothing,
// and the node says so.
func openLedger(log *slog.Logger, book *seals.Book) *espledger.Ledger {
	if book == nil {
		log.Warn("no TPM in use: nothing on the ESP can be authenticated; whoever can write the disk while the " +
			"machine is off can change the CA, CRL and peers this node trusts before its data volume opens")
		return espledger.Unauthenticated(storage.ESPRoot)
	}
	l, err := espledger.Open(storage.ESPRoot, book, log)
	if err != nil {
		log.Error("refusing every file the ESP's ledger covers", "err", err)
		return espledger.Refusing(storage.ESPRoot, err)
	}
	if l.Refused() == nil {
		log.Info("the ESP's ledger checks out: its state is this node's own")
	}
	return l
}

// clusterKeys returns the keeper of the node's cluster unlock key, built
// whole from p, which has unsealed what it needs from the ESP and answers
// its peers' share requests.
func clusterKeys(ctx context.Context, log *slog.Logger, p keeperParts) *clusterkey.Keeper {
	keys := &clusterkey.Keeper{
		IP:          p.ip,
		ESPRoot:     storage.ESPRoot,
		Ledger:      p.ledger,
		Local:       storage.LocalEscrow(storage.ESPRoot, p.policy, p.book),
		Seals:       p.book,
		Log:         log.With(console.ServiceKey, "unlock"),
		GiveUp:      p.giveUp,
		WhileLocked: p.whileLocked,
	}
	keys.Boot(ctx)
	return keys
}

// keeperParts are what clusterKeys builds the keeper from.
type keeperParts struct {
	// book seals its keys (nil: in clear, without a TPM in use) under
	// policy; ledger authenticates the ESP's files.
	book   *seals.Book
	policy keyfile.TPMPolicy
	ledger *espledger.Ledger
	// ip is the node's address on this boot.
	ip netip.Addr
	// giveUp ends the wait for the unlock key (a network on trial that
	// does not reach the peers); whileLocked runs while it waits.
	giveUp      <-chan struct{}
	whileLocked func(context.Context)
}

// capPCRs caps the PCRs the keys are sealed to, once bringUp is past
// unsealing them (or failed before). The TPM stays open: the node seals
// keys it makes later to the values from before the cap.
func capPCRs(log *slog.Logger, t *tpm.TPM) error {
	if t == nil {
		return nil
	}
	if err := t.Cap(tpm.DefaultPCRs); err != nil {
		return fmt.Errorf("%w: refusing to run with keys that could be unsealed again in this boot", err)
	}
	log.Info("PCRs capped: nothing can unseal the keys again in this boot", "pcrs", fmt.Sprint(tpm.DefaultPCRs))
	return nil
}
