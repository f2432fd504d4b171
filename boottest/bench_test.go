//go:build boot

package boottest

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/borough-os/borough/internal/initramfs"
	"github.com/borough-os/borough/qemu"
)

// bootRuns is how many boots each median is taken over.
const bootRuns = 5

// BenchmarkBoot measures seconds from QEMU's start to "borough: init
// started" for Borough's init, and for trivialinit, which prints the same
// line as its first act: the firmware and kernel floor. Boots alternate
// between the two so that machine load affects both alike.
func BenchmarkBoot(b *testing.B) {
	node := nodeImage(b)
	trivial := buildImage(b, trivialInitramfs(b))
	var nodeTimes, floorTimes []float64
	for range bootRuns {
		nodeTimes = append(nodeTimes, timeToInit(b, node))
		floorTimes = append(floorTimes, timeToInit(b, trivial))
	}
	n, f := median(nodeTimes), median(floorTimes)
	b.ReportMetric(n, "s-to-init")
	b.ReportMetric(f, "s-floor")
	b.ReportMetric(n-f, "s-over-floor")
	b.Logf("QEMU start to \"borough: init started\", median of %d boots: Borough init %.2f s, trivial init %.2f s, difference %.2f s (target: under 0.5 s)",
		bootRuns, n, f, n-f)
	b.Logf("all boots: Borough %v, trivial %v", nodeTimes, floorTimes)
}

func trivialInitramfs(b *testing.B) []byte {
	bin := filepath.Join(b.TempDir(), "trivialinit")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, "./trivialinit")
	cmd.Env = append(cmd.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("building trivialinit: %v\n%s", err, out)
	}
	var buf bytes.Buffer
	if err := initramfs.Build(&buf, initramfs.Params{Init: bin}); err != nil {
		b.Fatal(err)
	}
	return buf.Bytes()
}

// timeToInit boots img once, quietly, and returns the seconds to init.
func timeToInit(b *testing.B, img string) float64 {
	vm, err := qemu.Start(context.Background(), qemu.Options{
		Image: img, StateDir: filepath.Join(b.TempDir(), "vm"),
	})
	if err != nil {
		b.Fatal(err)
	}
	t, err := vm.WaitFor("borough: init started", bootTimeout)
	if err != nil {
		b.Fatal(err)
	}
	vm.Kill()
	return t.Seconds()
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
