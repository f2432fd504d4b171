//go:build boot

package boottest

import (
	"bytes"
	"context"
	"path/filepath"
	"slices"
	"testing"

	"github.com/borough-os/borough/internal/initramfs"
	"github.com/borough-os/borough/qemu"
)

// bootRuns is how many boots each median is taken over.
const bootRuns = 5

// BenchmarkBoot measures, in seconds from QEMU's start and as the median
// of bootRuns boots of each, side by side: the firmware and kernel floor
// (trivialinit, which prints "borough: init started" as its first act),
// Borough's "init started", and "node running" on a node's first boot
// and on its restart. A restart is measured against the floor's second
// boot in the same VM: the firmware starts a VM whose variables it has
// written before about 2 s sooner than a new one, and a restart measured
// against the first-boot floor would be credited with that. The kinds of
// boot take turns, so that machine load affects them alike. It also
// reports the median, within each boot, of the time from Borough's "init
// started" to "node running": on this machine the firmware's part of a
// boot varies by seconds from one boot to the next, and since init starts
// at the floor, that in-boot time is the steadier measure of what Borough
// adds to it. Beside the difference of the medians, which the targets
// are stated in, it reports the median of each turn's difference (a node
// boot minus the floor boot of the same turn), which machine load that
// drifts over minutes moves less. A TPM node's restart is measured in each
// turn too (its first boot not counted), against the restart without
// one: what the boot's unseals, the ledger's, the keys' and the epoch's,
// cost.
func BenchmarkBoot(b *testing.B) {
	_, cfgFile := bootstrapped(b, "bench")
	trivial := buildImage(b, trivialInitramfs(b))
	var floor, warmFloor, init, first, restart, firstOwn, restartOwn, tpmRestart, tpmRestartOwn []float64
	for range bootRuns {
		floorOpts := qemu.Options{Image: trivial, StateDir: filepath.Join(b.TempDir(), "vm")}
		floor = append(floor, timeTo(b, floorOpts, false, "borough: init started")[0])
		warmFloor = append(warmFloor, timeTo(b, floorOpts, false, "borough: init started")[0])
		opts := qemu.Options{Image: nodeImage(b), StateDir: filepath.Join(b.TempDir(), "vm"), FwCfg: cfgFile, Network: true}
		t := timeTo(b, opts, true, "borough: init started", running)
		init, first, firstOwn = append(init, t[0]), append(first, t[1]), append(firstOwn, t[1]-t[0])
		t = timeTo(b, opts, true, "borough: init started", running)
		restart, restartOwn = append(restart, t[1]), append(restartOwn, t[1]-t[0])
		opts.StateDir, opts.TPM = filepath.Join(b.TempDir(), "vm"), true
		timeTo(b, opts, true, running)
		t = timeTo(b, opts, true, "borough: init started", running)
		tpmRestart, tpmRestartOwn = append(tpmRestart, t[1]), append(tpmRestartOwn, t[1]-t[0])
	}
	f, w := median(floor), median(warmFloor)
	for _, m := range []struct {
		unit string
		xs   []float64
	}{{"s-floor", floor}, {"s-floor-second-boot", warmFloor}, {"s-init", init}, {"s-first-running", first},
		{"s-restart-running", restart}, {"s-first-init-to-running", firstOwn}, {"s-restart-init-to-running", restartOwn},
		{"s-first-over-floor-by-turn", minus(first, floor)}, {"s-restart-over-floor-by-turn", minus(restart, warmFloor)},
		{"s-tpm-restart-running", tpmRestart}, {"s-tpm-restart-init-to-running", tpmRestartOwn},
		{"s-tpm-over-plain-restart-init-to-running-by-turn", minus(tpmRestartOwn, restartOwn)}} {
		b.ReportMetric(median(m.xs), m.unit)
	}
	b.Logf("QEMU start to, median of %d boots: floor (trivial init) %.2f s, on its VM's second boot %.2f s; "+
		"Borough's init started %.2f s (+%.2f); node running on a first boot %.2f s (+%.2f, target +1.5: %s), "+
		"on a restart %.2f s (+%.2f over the second-boot floor, target +1.0: %s)",
		bootRuns, f, w, median(init), median(init)-f, median(first), median(first)-f, verdict(median(first)-f <= 1.5),
		median(restart), median(restart)-w, verdict(median(restart)-w <= 1.0))
	tpm := median(minus(tpmRestartOwn, restartOwn))
	b.Logf("a TPM node's restart, init started to node running, over a node's without TPM in the same turn, median: %+.2f s (target +0.2: %s); "+
		"QEMU start to node running %.2f s", tpm, verdict(tpm <= 0.2), median(tpmRestart))
	b.Logf("from init started to node running within a boot, median: first boot %.2f s, restart %.2f s",
		median(firstOwn), median(restartOwn))
	b.Logf("node running over the floor booted in the same turn, median: first boot +%.2f s, restart +%.2f s",
		median(minus(first, floor)), median(minus(restart, warmFloor)))
	b.Logf("all boots: floor %v, second-boot floor %v, init %v, first %v, restart %v", floor, warmFloor, init, first, restart)
}

// BenchmarkMemory finds the smallest memory, in 32 MiB steps down from
// 512 MiB, with which a node's first boot reaches "node running".
func BenchmarkMemory(b *testing.B) {
	_, cfgFile := bootstrapped(b, "bench")
	smallest := 0
	for mib := 512; mib >= 32; mib -= 32 {
		vm, err := qemu.Start(context.Background(), qemu.Options{Image: nodeImage(b), StateDir: filepath.Join(b.TempDir(), "vm"),
			FwCfg: cfgFile, Network: true, MemoryMiB: mib})
		if err != nil {
			b.Fatal(err)
		}
		_, err = vm.WaitFor(running, bootTimeout)
		vm.Kill()
		if err != nil {
			b.Logf("%d MiB: no node running: %v\n%s", mib, err, vm.Tail(10))
			break
		}
		smallest = mib
	}
	if smallest == 0 {
		b.Fatal("no node ran even with 512 MiB")
	}
	b.ReportMetric(float64(smallest), "MiB-smallest")
	b.Logf("the smallest memory in which a node reaches \"node running\", in 32 MiB steps from 512: %d MiB (target 128)", smallest)
}

// timeTo boots opts once, quietly, and returns the seconds from QEMU's
// start to each line, in order. With powerOff the VM is then powered off
// cleanly, for a node's next boot to be a restart; without, it is killed
// (trivialinit powers off by itself).
func timeTo(b *testing.B, opts qemu.Options, powerOff bool, lines ...string) []float64 {
	if opts.StateDir == "" {
		opts.StateDir = filepath.Join(b.TempDir(), "vm")
	}
	vm, err := qemu.Start(context.Background(), opts)
	if err != nil {
		b.Fatal(err)
	}
	defer vm.Kill()
	var at []float64
	for _, l := range lines {
		t, err := vm.WaitFor(l, bootTimeout)
		if err != nil {
			b.Fatalf("%v\n%s", err, vm.Tail(20))
		}
		at = append(at, t.Seconds())
	}
	if powerOff {
		if err := vm.PowerOff(powerTimeout); err != nil {
			b.Fatal(err)
		}
	}
	return at
}

func trivialInitramfs(b *testing.B) []byte {
	var buf bytes.Buffer
	if err := initramfs.Build(&buf, initramfs.Params{Init: goBuild(b, "./trivialinit", "trivialinit")}); err != nil {
		b.Fatal(err)
	}
	return buf.Bytes()
}

// minus is xs[i]-ys[i] for each i.
func minus(xs, ys []float64) []float64 {
	d := make([]float64, len(xs))
	for i := range xs {
		d[i] = xs[i] - ys[i]
	}
	return d
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
