//go:build boot

package boottest

import (
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/borough-os/borough/internal/cmdline"
	"github.com/borough-os/borough/qemu"
)

// storageRuns is how many first and later boots the medians cover.
const storageRuns = 3

// BenchmarkStorage measures, with a TPM, the time from the node process's start to
// /data mounted on first boot and on a later boot, with the phases the
// node reports: unseal, map, mkfs or fsck, mount.
func BenchmarkStorage(b *testing.B) {
	first := map[string][]float64{}
	later := map[string][]float64{}
	for range storageRuns {
		img := nodeImage(b, cmdline.PoweroffOnFatal)
		state := b.TempDir()
		for _, phase := range []struct {
			line   string
			fields []string
			into   map[string][]float64
		}{
			{created, []string{"map", "mkfs", "mount"}, first},
			{unlocked, []string{"unseal", "map", "fsck", "mount"}, later},
		} {
			vm, err := qemu.Start(b.Context(), qemu.Options{Image: img, StateDir: state, TPM: true, Network: true})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := vm.WaitFor(ready, bootTimeout); err != nil {
				b.Fatal(err)
			}
			console := vm.Console()
			if err := vm.PowerOff(powerTimeout); err != nil {
				b.Fatal(err)
			}
			phase.into["total"] = append(phase.into["total"], kernelTime(b, console, phase.line)-kernelTime(b, console, "borough: node process started"))
			for _, f := range phase.fields {
				phase.into[f] = append(phase.into[f], field(b, console, phase.line, f))
			}
		}
	}
	report := func(name string, m map[string][]float64, fields ...string) {
		for _, f := range fields {
			b.ReportMetric(median(m[f]), name+"-"+f+"-s")
		}
	}
	report("first", first, "total", "map", "mkfs", "mount")
	report("later", later, "total", "unseal", "map", "fsck", "mount")
}

// kernelTime returns the boot-time stamp of the first console line
// containing s.
func kernelTime(b *testing.B, console, s string) float64 {
	m := regexp.MustCompile(`\[\s*([0-9.]+)\] [^\n]*` + regexp.QuoteMeta(s)).FindStringSubmatch(console)
	if m == nil {
		b.Fatalf("console has no line with %q", s)
	}
	t, _ := strconv.ParseFloat(m[1], 64)
	return t
}

// field returns, in seconds, the duration attribute key of the line
// containing s.
func field(b *testing.B, console, s, key string) float64 {
	m := regexp.MustCompile(regexp.QuoteMeta(s) + `[^\n]* ` + key + `=([0-9.a-zµ]+)`).FindStringSubmatch(console)
	if m == nil {
		b.Fatalf("console line %q has no %s=", s, key)
	}
	d, err := time.ParseDuration(m[1])
	if err != nil {
		b.Fatal(err)
	}
	return d.Seconds()
}
