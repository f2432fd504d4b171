//go:build boroughtest

// The test hooks: what boot tests ask for with borough.test.* parameters,
// in the kernel command line of a test image or through QEMU's fw_cfg.
// Only test builds of the node (build tag boroughtest, out/test/ from
// build.sh) have them; release.go stands in for them in the image users
// get, and `make test` checks it has no borough.test strings.

package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/borough-os/borough/datavol"
	"github.com/borough-os/borough/esp"
	"github.com/borough-os/borough/internal/cmdline"
	"github.com/borough-os/borough/internal/efivar"
	"github.com/borough-os/borough/internal/fwcfg"
	"github.com/borough-os/borough/internal/storage"
	"github.com/borough-os/borough/internal/supervisor"
)

// Roles of the orphan test hook's helpers.
const (
	roleOrphaner = "test-orphaner"
	roleSleeper  = "test-sleeper"
)

// testRole runs role if it is a test helper's and says whether it was.
func testRole(role string) bool {
	switch role {
	case roleOrphaner:
		orphaner()
	case roleSleeper:
		time.Sleep(time.Second)
	default:
		return false
	}
	return true
}

// addTestParams adds the borough.test.* parameters that QEMU passes for
// one boot through fw_cfg to params.
func addTestParams(log *slog.Logger, params cmdline.Params) {
	b, err := fwcfg.Read(fwcfg.TestCmdline)
	if err != nil {
		return
	}
	if ignored := params.MergeTest(string(b)); len(ignored) > 0 {
		log.Warn("ignoring parameters in fw_cfg that are not test parameters", "params", strings.Join(ignored, ","))
	}
}

// testHooks returns the services that boot tests ask for on the kernel
// command line. A production command line has none.
func testHooks(params cmdline.Params, st *storage.Storage) []supervisor.Service {
	s := []supervisor.Service{{Name: "test-control", Run: control}}
	if args, ok := params[cmdline.TestBootEntry]; ok {
		s = append(s, supervisor.Service{Name: "testhook", Run: func(ctx context.Context) error {
			return writeBootEntry(ctx, st, args)
		}})
	}
	if params.Has(cmdline.TestFatal) {
		reason := params[cmdline.TestFatal]
		s = append(s, supervisor.Service{Name: "testhook", Run: func(context.Context) error {
			return supervisor.Fatal(fmt.Errorf("%s: %s", cmdline.TestFatal, reason))
		}})
	}
	if params.Has(cmdline.TestOrphan) {
		s = append(s, supervisor.Service{Name: "orphan-test", Run: orphanTest})
	}
	if dev := params[cmdline.TestCacheWrite]; dev != "" {
		s = append(s, supervisor.Service{Name: "cache-test", Run: func(ctx context.Context) error {
			return cacheWrite(ctx, dev)
		}})
	}
	if n, err := strconv.Atoi(params[cmdline.TestMemory]); err == nil && n > 0 {
		s = append(s, supervisor.Service{Name: "memory", Run: func(ctx context.Context) error {
			return reportMemory(ctx, time.Duration(n)*time.Second)
		}})
	}
	return s
}

// testBootEntry is the number of the boot entry writeBootEntry writes.
const testBootEntry = 0x0b0b

// writeBootEntry writes boot entry testBootEntry for the boot binary on
// this node's ESP, with args as its load options, and arms it with
// BootNext, unless this boot came from it.
func writeBootEntry(ctx context.Context, st *storage.Storage, args string) error {
	log := supervisor.Logger(ctx)
	if n, err := efivar.BootCurrent(efivar.Dir); err == nil && n == testBootEntry {
		log.Info("test: booted from the test boot entry")
		return nil
	}
	part, err := st.Disk.ESPPartition()
	if err != nil {
		return err
	}
	entry := efivar.LoadOption{
		Description: "Borough test entry",
		Partition:   part,
		Path:        `\` + strings.ReplaceAll(string(esp.BootBinary), "/", `\`),
		Arguments:   args,
	}
	if err := efivar.SetBootEntry(efivar.Dir, testBootEntry, entry); err != nil {
		return err
	}
	if err := efivar.SetBootNext(efivar.Dir, testBootEntry); err != nil {
		return err
	}
	log.Info("test: boot entry written and armed for the next boot", "entry", efivar.BootEntryName(testBootEntry), "args", args)
	return nil
}

// orphanTest runs an orphaner, which starts a sleeper and exits without
// waiting for it. The sleeper becomes an orphan of process 1, and once it
// exits its /proc entry must vanish: if process 1 did not reap it, it
// would stay there as a zombie.
func orphanTest(ctx context.Context) error {
	log := supervisor.Logger(ctx)
	out, err := exec.CommandContext(ctx, os.Args[0], roleOrphaner).Output()
	if err != nil {
		return fmt.Errorf("running orphaner: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		return fmt.Errorf("orphaner printed %q, want a pid: %w", out, err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); errors.Is(err, os.ErrNotExist) {
			log.Info("orphan reaped", "pid", pid)
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	log.Error("orphan not reaped", "pid", pid, "state", procState(pid))
	return nil
}

// procState returns the State line of /proc/PID/status.
func procState(pid int) string {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if state, ok := strings.CutPrefix(s.Text(), "State:"); ok {
			return strings.TrimSpace(state)
		}
	}
	return "unknown"
}

// orphaner starts a sleeper, prints its pid and exits without waiting.
func orphaner() {
	cmd := exec.Command(os.Args[0], roleSleeper)
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "orphaner:", err)
		os.Exit(1)
	}
	fmt.Println(cmd.Process.Pid)
}

// pauseHook returns a Pause function (of storage or cluster, named by
// what) for cmdline.TestPause: at the named first-boot step it stops for
// good, for a test to kill the VM.
func pauseHook(log *slog.Logger, params cmdline.Params, what string) func(string) {
	want, ok := params[cmdline.TestPause]
	if !ok {
		return nil
	}
	return func(step string) {
		if step == want {
			log.Info("test: paused after " + what + " step " + step)
			select {}
		}
	}
}

// volumeSize is the data volume's size cmdline.TestVolume stands for, in
// bytes, or 0.
func volumeSize(log *slog.Logger, params cmdline.Params) int64 {
	mib, err := strconv.ParseInt(params[cmdline.TestVolume], 10, 64)
	if err != nil || mib <= 0 {
		return 0
	}
	log.Info("test: the data volume's space budgeted as " + params[cmdline.TestVolume] + " MiB")
	return mib << 20
}

// testMarker implements cmdline.TestMarker on the mounted data volume.
func testMarker(log *slog.Logger, params cmdline.Params) error {
	value, ok := params[cmdline.TestMarker]
	if !ok {
		return nil
	}
	path := datavol.TestMarker.In(storage.DataRoot)
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) && value != "" {
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		if _, err := f.WriteString(value); err != nil {
			f.Close()
			return err
		}
		if err := errors.Join(f.Sync(), f.Close()); err != nil {
			return err
		}
		log.Info("test: wrote marker")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		log.Info("test: no marker", "err", err)
		return nil
	}
	log.Info("test: marker=" + string(b))
	return nil
}

// reportMemory logs the node process's resident memory and the machine's
// used memory every interval.
func reportMemory(ctx context.Context, interval time.Duration) error {
	log := supervisor.Logger(ctx)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
		rss := procField("/proc/self/status", "VmRSS:")
		total, avail := procField("/proc/meminfo", "MemTotal:"), procField("/proc/meminfo", "MemAvailable:")
		log.Info("test: memory", "node_rss_kib", rss, "machine_used_kib", total-avail)
	}
}

// procField returns the number (in kB) after key in a /proc file.
func procField(path, key string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key); ok {
			n, _ := strconv.Atoi(strings.Fields(v)[0])
			return n
		}
	}
	return -1
}

// cacheWrite writes block 1 of dev ('C's) straight to the disk
// (O_DIRECT: past the page cache), flushes the disk (fsync of a block
// device), then writes block 0 ('B's) the same way without a flush, and
// says so. A disk with a volatile write cache loses block 0 at a power
// cut and keeps block 1.
func cacheWrite(ctx context.Context, dev string) error {
	f, err := os.OpenFile(dev, os.O_RDWR|unix.O_DIRECT, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	// O_DIRECT needs an aligned buffer: a page of its own.
	buf, err := unix.Mmap(-1, 0, os.Getpagesize(), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return err
	}
	defer unix.Munmap(buf)
	for _, b := range []struct {
		fill  byte
		at    int64
		flush bool
	}{{'C', 4096, true}, {'B', 0, false}} {
		for i := range buf {
			buf[i] = b.fill
		}
		if _, err := f.WriteAt(buf[:4096], b.at); err != nil {
			return fmt.Errorf("writing %s at %d: %w", dev, b.at, err)
		}
		if b.flush {
			if err := f.Sync(); err != nil {
				return fmt.Errorf("flushing %s: %w", dev, err)
			}
		}
	}
	supervisor.Logger(ctx).Info("test: wrote block 1 with a flush and block 0 without one", "device", dev)
	return nil
}

// unbindTPM takes the TPM from its driver (TestUnbindTPM), as the
// kernel leaves a TPM whose probe failed.
func unbindTPM(log *slog.Logger, params cmdline.Params) {
	if !params.Has(cmdline.TestUnbindTPM) {
		return
	}
	const dev = "MSFT0101:00"
	if err := os.WriteFile("/sys/bus/platform/drivers/tpm_tis/unbind", []byte(dev), 0); err != nil {
		log.Error("test: unbinding the TPM", "err", err)
		return
	}
	log.Info("test: took the TPM from its driver", "device", dev)
}
