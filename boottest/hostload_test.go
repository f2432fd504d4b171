//go:build boot

package boottest

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// hostLoadEvery is how often the boot tests log the host's load.
const hostLoadEvery = time.Minute

// hostLoad prints, every hostLoadEvery until stop closes, how busy the
// host's cores were since the line before and how many QEMU processes
// run (this test binary's and any other's; go test -v's RUN and PASS
// lines say which tests). make test's time is the cores' time: the
// guests run under TCG, and which tests may run beside which depends on
// what the cores have to spare, over runs at different hours.
func hostLoad(stop <-chan struct{}) {
	before, err := cpuTimes()
	if err != nil {
		fmt.Printf("harness: no host load lines: %v\n", err)
		return
	}
	tick := time.NewTicker(hostLoadEvery)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		now, err := cpuTimes()
		if err != nil {
			fmt.Printf("harness: no more host load lines: %v\n", err)
			return
		}
		busy := 100 * float64(now.busy-before.busy) / float64(max(now.total-before.total, 1))
		fmt.Printf("harness: %s host CPU %.0f%% busy over the last %v; %d QEMU processes\n",
			time.Now().Format(time.TimeOnly), busy, hostLoadEvery, qemuProcesses())
		before = now
	}
}

// qemuProcesses counts the host's QEMU system emulators.
func qemuProcesses() int {
	comms, _ := filepath.Glob("/proc/[0-9]*/comm")
	n := 0
	for _, c := range comms {
		if b, err := os.ReadFile(c); err == nil && strings.HasPrefix(string(b), "qemu-system") {
			n++
		}
	}
	return n
}

// cpuCounts are the host's CPU time counters, in clock ticks, from the
// first line of /proc/stat: all of it, and all but idle and iowait. The
// line's first eight fields are the whole; guest time is counted again
// after them.
type cpuCounts struct{ total, busy uint64 }

func cpuTimes() (cpuCounts, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuCounts{}, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	fields := strings.Fields(line)
	if len(fields) < 6 || fields[0] != "cpu" {
		return cpuCounts{}, fmt.Errorf("/proc/stat begins %q, not with the cpu line", line)
	}
	var c cpuCounts
	for i, f := range fields[1:min(len(fields), 9)] {
		v, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return cpuCounts{}, fmt.Errorf("/proc/stat's cpu line %q: %w", line, err)
		}
		c.total += v
		if i != 3 && i != 4 { // idle, iowait
			c.busy += v
		}
	}
	return c, nil
}
