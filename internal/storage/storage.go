// Package storage brings up the node's storage at boot: it finds the boot
// disk, mounts the ESP, and turns the data partition into an encrypted
// ext4 filesystem at /data on first boot, or unlocks and mounts it on every
// later boot.
//
// The data volume's format is package crypt's. Its key needs two unlock
// keys: the local unlock key (LUK), kept on the ESP and sealed to the TPM
// when there is one, and the cluster unlock key (CUK), which the caller
// supplies through ClusterKeys (until the cluster keeps it, an Escrow on
// the ESP). Someone who takes the disk learns nothing without both; with a
// TPM, the LUK opens only on this machine, in this boot state.
//
// # Which key lives where
//
// docs/keys.md maps every key a node or its owner holds: where it is
// kept, what opens it, which package owns it. Storage is its volume
// layer: the LUK, and the CUK until the cluster holds it.
//
// What storage never does, whatever it is told: format a partition that
// holds a Borough volume, a damaged one, or anyone else's data. First boot
// happens only on an empty data partition or on one whose first boot
// crashed before committing the volume header (crypt.Probe). Any failure
// on a later boot stops the node with the reason and writes nothing to the
// data partition.
package storage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/borough-os/borough/esp"
	"github.com/borough-os/borough/internal/bootdisk"
	"github.com/borough-os/borough/internal/crypt"
	"github.com/borough-os/borough/internal/keyfile"
	"github.com/borough-os/borough/internal/seals"
	"github.com/borough-os/borough/internal/tpm"
)

const (
	// DataRoot is where the data volume is mounted.
	DataRoot = "/data"
	// mapName is the data volume's device-mapper name.
	mapName = "borough-data"
	mke2fs  = "/sbin/mke2fs"
	e2fsck  = "/sbin/e2fsck"
)

// Steps after which Config.Pause is called on first boot.
const (
	StepKeys   = "keys"   // unlock keys stored on the ESP
	StepIntent = "intent" // intent record written
	StepMkfs   = "mkfs"   // volume mapped and formatted
	StepHeader = "header" // header committed
)

// Config is what MountData needs.
type Config struct {
	// TPM is the machine's TPM, or nil if it has none.
	TPM *tpm.TPM
	// TPMFailed, if set, says why the machine has a TPM but TPM is nil
	// (tpm.ErrNotProbed): a volume is then neither created nor opened
	// unless Policy disables the TPM.
	TPMFailed error
	// Seals, if set, seals and unseals the local unlock key on TPM, and
	// remembers it for an update (package seals).
	Seals *seals.Book
	// Policy says whether the TPM must be used.
	Policy keyfile.TPMPolicy
	// ClusterKeys supplies the CUK; nil means an Escrow on the ESP.
	ClusterKeys ClusterKeys
	// Pause, if set, is called after each first-boot step (Step*), for
	// tests that crash the machine there.
	Pause func(step string)
	// LocalKey, if set, is given the local unlock key once MountData
	// has it (for the owner's recovery escrow); it must copy it.
	LocalKey func(luk []byte)
}

// Storage is the node's storage.
type Storage struct {
	Disk *bootdisk.Disk
	// FirstBoot is true if MountData created the data volume.
	FirstBoot bool
	log       *slog.Logger
	dataUp    bool
	// What Open found on the data partition, before anything wrote to
	// it; MountData acts on it. probeErr says why the volume is damaged.
	state    crypt.State
	header   *crypt.Header
	probeErr error
}

// Open finds the boot disk and mounts its ESP at ESPRoot. If the data
// partition is still empty, it first renews the partition table (new
// GUIDs, the data partition grown into free space; renewTable). It
// writes nothing to the data partition.
func Open(log *slog.Logger) (*Storage, error) {
	disk, err := bootdisk.FindDisk("/sys", "/dev", "/sys/firmware/efi/efivars")
	if err != nil {
		return nil, fmt.Errorf("finding boot disk: %w", err)
	}
	log.Info("boot disk", "disk", disk.Path, "esp", disk.ESP, "data", disk.Data, "found_by", disk.FoundBy)
	s := &Storage{Disk: disk, log: log}
	s.state, s.header, s.probeErr = probe(disk.Data)
	if s.Fresh() {
		size, err := renewTable(disk)
		if err != nil {
			return nil, err
		}
		log.Info("gave the disk and its partitions new GUIDs", "disk", disk.Table.GUID)
		if size > 0 {
			log.Info("grew data partition to fill the disk", "size", fmt.Sprintf("%.1fGiB", float64(size)/(1<<30)))
		}
	}
	if err := esp.Mount(disk.ESP, ESPRoot); err != nil {
		return nil, err
	}
	return s, nil
}

// Fresh says whether the data partition holds no volume yet (or one
// whose creation did not finish): MountData will create it.
func (s *Storage) Fresh() bool {
	return s.probeErr == nil && (s.state == crypt.StateEmpty || s.state == crypt.StateFormatting)
}

// MountData unlocks (or on first boot creates) the data volume and mounts
// it at DataRoot. ctx ends a wait for the cluster unlock key (a power
// request while the node waits for its peers or its owner).
func (s *Storage) MountData(ctx context.Context, cfg Config) error {
	if cfg.Pause == nil {
		cfg.Pause = func(string) {}
	}
	k := keyFiles{root: ESPRoot, tpm: cfg.TPM, policy: cfg.Policy}
	if cfg.TPM != nil {
		k.book = cfg.Seals
	}
	switch {
	case cfg.Policy != keyfile.TPMDisabled && cfg.TPMFailed != nil:
		return cfg.TPMFailed
	case cfg.Policy == keyfile.TPMRequired && cfg.TPM == nil:
		return errors.New("the storage policy requires a TPM, and this machine has none")
	case cfg.Policy == keyfile.TPMDisabled:
		k.tpm, k.book = nil, nil
	}
	if cfg.ClusterKeys == nil {
		cfg.ClusterKeys = Escrow{k: k}
	}
	if s.probeErr != nil {
		return s.probeErr
	}
	var err error
	switch s.state {
	case crypt.StateEmpty, crypt.StateFormatting:
		s.FirstBoot = true
		err = s.create(cfg, k, s.state)
	case crypt.StateFormatted:
		err = s.unlock(ctx, cfg, k, s.header)
	case crypt.StateForeign:
		err = fmt.Errorf("data partition %s holds data that is not a Borough volume; refusing to format it. "+
			"If it may be erased, zero its first 2 MiB (dd if=/dev/zero of=PARTITION bs=1M count=2) and boot again", s.Disk.Data)
	}
	if err != nil {
		return err
	}
	s.dataUp = true
	return nil
}

func probe(dev string) (crypt.State, *crypt.Header, error) {
	f, err := os.Open(dev)
	if err != nil {
		return 0, nil, fmt.Errorf("opening data partition: %w", err)
	}
	defer f.Close()
	state, h, err := crypt.Probe(f)
	if err != nil {
		return state, nil, fmt.Errorf("data partition %s: %w; not touching it. Recover it with both unlock keys (README: Recovery)", dev, err)
	}
	return state, h, nil
}

// create makes a new data volume.
func (s *Storage) create(cfg Config, k keyFiles, state crypt.State) (err error) {
	log := s.log
	if state == crypt.StateFormatting {
		log.Warn("the previous first boot stopped before the data volume was complete; formatting it afresh")
	}
	if k.tpm == nil {
		log.Warn("NO TPM: the local unlock key is stored IN CLEAR on the ESP; anyone with this disk can read the data volume")
	}
	luk, err := k.newKey()
	if err != nil {
		return fmt.Errorf("making local unlock key: %w", err)
	}
	defer clear(luk)
	if err := k.store(esp.SealedLocalKey, luk); err != nil {
		return err
	}
	if cfg.LocalKey != nil {
		cfg.LocalKey(luk)
	}
	cuk, err := cfg.ClusterKeys.New()
	if err != nil {
		return fmt.Errorf("making cluster unlock key: %w", err)
	}
	defer clear(cuk)
	cfg.Pause(StepKeys)

	header, err := crypt.NewHeader(luk, cuk)
	if err != nil {
		return err
	}
	key, err := header.VolumeKey(luk, cuk)
	if err != nil {
		return err
	}
	defer clear(key)
	if err := withPartition(s.Disk.Data, crypt.WriteIntent); err != nil {
		return err
	}
	cfg.Pause(StepIntent)

	start := time.Now()
	dev, err := s.mapVolume(key)
	if err != nil {
		return err
	}
	defer unmapOnError(&err)
	mapped := time.Now()
	if err := run(log, mke2fs, MkfsArgs(dev)...); err != nil {
		return fmt.Errorf("formatting data volume: %w", err)
	}
	formatted := time.Now()
	cfg.Pause(StepMkfs)

	if err := withPartition(s.Disk.Data, func(w crypt.Syncer) error { return crypt.WriteHeader(w, header) }); err != nil {
		return err
	}
	cfg.Pause(StepHeader)
	if err := mountData(dev); err != nil {
		return err
	}
	log.Info("data volume created and mounted", "path", DataRoot, "tpm", k.tpm != nil,
		"map", mapped.Sub(start).Round(time.Millisecond), "mkfs", formatted.Sub(mapped).Round(time.Millisecond),
		"mount", time.Since(formatted).Round(time.Millisecond))
	return nil
}

// unlock opens and mounts the existing data volume.
func (s *Storage) unlock(ctx context.Context, cfg Config, k keyFiles, header *crypt.Header) (err error) {
	start := time.Now()
	luk, err := k.load(esp.SealedLocalKey)
	if err != nil {
		return explainKeyError("local unlock key", err)
	}
	defer clear(luk)
	if k.tpm == nil {
		s.log.Warn("NO TPM in use: the local unlock key is IN CLEAR on the ESP, and nothing there is authenticated " +
			"before the data volume opens. While the cluster holds this node's cluster unlock key, the volume stays " +
			"closed to whoever has the disk; a node alone can be read and changed by them")
	}
	if cfg.LocalKey != nil {
		cfg.LocalKey(luk)
	}
	cuk, err := cfg.ClusterKeys.Get(ctx)
	if err != nil {
		return explainKeyError("cluster unlock key", err)
	}
	defer clear(cuk)
	key, err := header.VolumeKey(luk, cuk)
	if err != nil {
		return fmt.Errorf("unlocking data volume: %w: the keys on this ESP belong to another volume. "+
			"Put the disk's own ESP back, or recover the volume with its keys (README: Recovery)", err)
	}
	defer clear(key)
	unsealed := time.Now()
	dev, err := s.mapVolume(key)
	if err != nil {
		return err
	}
	defer unmapOnError(&err)
	mapped := time.Now()
	state := superblockState(dev)
	e2fsck, err := fsck(s.log, dev, state)
	if err != nil {
		return err
	}
	checked := time.Now()
	again, err := mountReplayed(s.log, dev, state)
	if err != nil {
		return err
	}
	e2fsck = e2fsck || again
	s.log.Info("data volume unlocked and mounted", "path", DataRoot,
		"unseal", unsealed.Sub(start).Round(time.Millisecond), "map", mapped.Sub(unsealed).Round(time.Millisecond),
		"fsck", checked.Sub(mapped).Round(time.Millisecond), "e2fsck", e2fsck, "mount", time.Since(checked).Round(time.Millisecond))
	return nil
}

// explainKeyError says what a key failure means and what to do.
func explainKeyError(what string, err error) error {
	switch {
	case errors.Is(err, tpm.ErrWrongTPM):
		return fmt.Errorf("unsealing the %s: %w: this disk was set up on another machine, or this machine's TPM was cleared. "+
			"Move the disk back, or recover the volume with both unlock keys (README: Recovery)", what, err)
	case errors.Is(err, tpm.ErrPolicy):
		return fmt.Errorf("unsealing the %s: %w: the boot binary, its command line or the Secure Boot state changed since the key was sealed (PCRs 4, 7 and 12). "+
			"Boot the previous boot binary, or recover the volume with both unlock keys (README: Recovery)", what, err)
	case errors.Is(err, ErrTPMDisabled):
		return fmt.Errorf("reading the %s: %w: enrol the node with the storage policy it was set up with", what, err)
	case errors.Is(err, ErrNoTPMForKey):
		return fmt.Errorf("reading the %s: %w: enable the TPM in the firmware, or move the disk back to its machine", what, err)
	default:
		return fmt.Errorf("reading the %s: %w", what, err)
	}
}

// unmapOnError removes the mapping, and with it the key from the kernel,
// when *err is set: a failed mount must not leave the volume open.
func unmapOnError(err *error) {
	if *err != nil {
		_ = crypt.Unmap(mapName)
	}
}

// mapVolume maps the data volume with key.
func (s *Storage) mapVolume(key []byte) (string, error) {
	sectors, err := partitionSectors(s.Disk.Data)
	if err != nil {
		return "", err
	}
	dev, err := crypt.Map(mapName, s.Disk.Data, sectors, key)
	if err != nil {
		return "", fmt.Errorf("mapping data volume: %w", err)
	}
	return dev, nil
}

func partitionSectors(dev string) (uint64, error) {
	f, err := os.Open(dev)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	size, err := unix.IoctlGetUint64(int(f.Fd()), unix.BLKGETSIZE64)
	if err != nil {
		return 0, fmt.Errorf("reading size of %s: %w", dev, err)
	}
	return size / 512, nil
}

// withPartition opens the data partition for writing and calls fn on it.
func withPartition(dev string, fn func(crypt.Syncer) error) error {
	f, err := os.OpenFile(dev, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("opening data partition: %w", err)
	}
	if err := fn(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// fsck checks the volume's filesystem and repairs what is safe to repair,
// with e2fsck unless its superblock says it is clean or has only its
// journal to replay (clean.go); ran says whether e2fsck ran.
func fsck(log *slog.Logger, dev string, state fsState) (ran bool, err error) {
	if state != fsCheck {
		return false, nil
	}
	err = run(log, e2fsck, "-p", dev)
	var exit *exec.ExitError
	// 1: errors corrected; 2: corrected, reboot advised (root fs only).
	if errors.As(err, &exit) && (exit.ExitCode() == 1 || exit.ExitCode() == 2) {
		log.Warn("e2fsck corrected errors on the data volume")
		return true, nil
	}
	if err != nil {
		return true, fmt.Errorf("checking data volume: %w: it needs a manual e2fsck (README: Recovery)", err)
	}
	return true, nil
}

// mountReplayed mounts the volume, whose superblock read state before
// fsck. A journal left to replay, the kernel replays as it mounts; if the
// mount fails, or the replayed journal had recorded an error, the volume
// gets what it got before the kernel was trusted with the replay:
// e2fsck, and a second mount. again says whether it did.
func mountReplayed(log *slog.Logger, dev string, state fsState) (again bool, err error) {
	v := volume{
		mount:   func() error { return mountData(dev) },
		unmount: func() error { return unix.Unmount(DataRoot, 0) },
		errored: func() bool { return recordsError(dev) },
		check: func() error {
			_, err := fsck(log, dev, fsCheck)
			return err
		},
	}
	return v.mountReplayed(log, state)
}

// volume is what mountReplayed does to the data volume, apart so that its
// choices can be tested on their own.
type volume struct {
	mount, unmount, check func() error
	// errored says whether the mounted filesystem records an error.
	errored func() bool
}

func (v volume) mountReplayed(log *slog.Logger, state fsState) (again bool, err error) {
	err = v.mount()
	if state != fsReplay || (err == nil && !v.errored()) {
		return false, err
	}
	if err == nil {
		err = errors.New("the replayed journal had recorded an error")
		if uerr := v.unmount(); uerr != nil {
			return false, fmt.Errorf("unmounting the data volume to check it, as %v: %w", err, uerr)
		}
	}
	log.Warn("the kernel's replay of the data volume's journal did not leave it clean: checking it with e2fsck", "err", err)
	start := time.Now()
	if err := v.check(); err != nil {
		return true, err
	}
	log.Info("e2fsck checked the data volume after the journal's replay", "took", time.Since(start).Round(time.Millisecond))
	if err := v.mount(); err != nil {
		return true, fmt.Errorf("mounting the data volume after e2fsck: %w", err)
	}
	return true, nil
}

// MkfsArgs are mke2fs's arguments for the new data volume dev. A first
// boot waits for mke2fs, so it writes only the metadata it must: not the
// journal's zeroes (lazy_journal_init: ext4's journal checksums reject
// stale blocks, and under a fresh dm-crypt key the partition's old
// contents read as noise), not the inode tables' (lazy_itable_init: the
// kernel zeroes them in the background), and no discard of the whole
// partition (docs/decisions.md, "mke2fs on a first boot"). make bench
// formats plain etcd's disk with them too, to compare like with like.
func MkfsArgs(dev string) []string {
	return []string{"-t", "ext4", "-q", "-F", "-L", "borough-data", "-m", "0",
		"-E", "lazy_itable_init=1,lazy_journal_init=1,nodiscard", dev}
}

func mountData(dev string) error {
	if err := os.MkdirAll(DataRoot, 0o700); err != nil {
		return err
	}
	if err := unix.Mount(dev, DataRoot, "ext4", unix.MS_NODEV|unix.MS_NOSUID|unix.MS_NOEXEC, ""); err != nil {
		return &os.PathError{Op: "mount ext4 " + dev, Path: DataRoot, Err: err}
	}
	return nil
}

// run runs a tool, logging its output, and returns its error with the
// output's last line.
func run(log *slog.Logger, name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	text := strings.TrimSpace(string(out))
	if text != "" {
		log.Info(name, "output", text)
	}
	if err != nil {
		lines := strings.Split(text, "\n")
		return fmt.Errorf("%s: %w: %s", name, err, lines[len(lines)-1])
	}
	return nil
}

// Close unmounts the data volume, unmaps it, and unmounts the ESP, for a
// clean shutdown. It tries every step and returns every failure.
func (s *Storage) Close() error {
	var errs []error
	if s.dataUp {
		if err := unix.Unmount(DataRoot, 0); err != nil {
			errs = append(errs, fmt.Errorf("unmounting %s: %w", DataRoot, err))
		} else if err := crypt.Unmap(mapName); err != nil {
			errs = append(errs, err)
		}
	}
	if err := unix.Unmount(ESPRoot, 0); err != nil {
		errs = append(errs, fmt.Errorf("unmounting %s: %w", ESPRoot, err))
	}
	return errors.Join(errs...)
}
