//go:build boot

package boottest

import (
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/borough-os/borough/internal/cmdline"
	"github.com/borough-os/borough/qemu"
)

// BenchmarkUpdate measures, on one node, side by side: a reboot through
// the node API to `node running` (the floor of an update), an update
// from `borough update` to the new slot's confirmation, and a rollback
// from `borough update` of a version that fails to the old slot's `node
// running`.
func BenchmarkUpdate(b *testing.B) {
	config, cfgFile := bootstrapped(b, "bench")
	v1, v2 := versionedImage(b, "1.0.0"), signedImage(b, config, "1.1.0")
	failing := signedImage(b, config, "1.2.0", cmdline.TestFatal+"=bench")
	apiPort := freePort(b)
	api := "127.0.0.1:" + strconv.Itoa(apiPort)
	vm, err := qemu.Start(b.Context(), qemu.Options{Image: v1, StateDir: b.TempDir(), Network: true, FwCfg: cfgFile,
		Watchdog: true, Forwards: []qemu.Forward{{Host: apiPort, Guest: 7835}}})
	if err != nil {
		b.Fatal(err)
	}
	defer vm.Kill()
	if _, err := vm.WaitFor(running, bootTimeout); err != nil {
		b.Fatal(err)
	}
	cli(b, "--config", config, "node", "info", api, "--fingerprint", fingerprint(b, vm))
	// timed runs the CLI with args and returns the time from its start to
	// the last of lines on the console.
	timed := func(args []string, lines ...string) time.Duration {
		start := vm.Since()
		cmd := exec.Command(filepath.Join(outDir(b), "bin", "borough"), append([]string{"--config", config}, args...)...)
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		defer cmd.Wait()
		var at time.Duration
		for _, l := range lines {
			if at, err = vm.WaitFor(l, bootTimeout); err != nil {
				b.Fatal(err)
			}
		}
		return at - start
	}
	reboot := timed([]string{"node", "reboot", api}, "borough: rebooting", running)
	rollback := timed([]string{"update", api, failing}, "did not confirm itself: rolled back", running)
	update := timed([]string{"update", api, v2}, "update confirmed: slot B runs 1.1.0")
	b.ReportMetric(reboot.Seconds(), "s-reboot-floor")
	b.ReportMetric(update.Seconds(), "s-update-to-confirmed")
	b.ReportMetric(rollback.Seconds(), "s-rollback-to-running")
}
