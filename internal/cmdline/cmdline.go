// Package cmdline parses the kernel command line and names the parameters
// Borough reads from it. Process 1 reads PoweroffOnFatal; the node process
// parses the line once at start and passes values down. The borough.test.*
// parameters are read only by test builds of the node (node/testhooks.go).
package cmdline

import (
	"fmt"
	"os"
	"sort"
	"strings"
)

// Parameters Borough understands.
const (
	// PoweroffOnFatal makes a fatal error power the machine off instead
	// of rebooting it, so that a test VM exits.
	PoweroffOnFatal = "borough.debug.poweroff_on_fatal"
	// TestFatal makes a service fail fatally with this parameter's value
	// as the reason. For boot tests of the fatal path.
	TestFatal = "borough.test.fatal"
	// TestOrphan makes init start a process that leaves an orphaned
	// grandchild behind, and report whether PID 1 reaped it.
	TestOrphan = "borough.test.orphan"
	// TestPause makes first boot stop for good after the storage or join
	// step named by its value, so that a test can crash the machine there.
	TestPause = "borough.test.pause"
	// TestMarker makes init report /data/marker's contents after
	// mounting /data and, if the file is missing and the parameter has a
	// value, write the value there first.
	TestMarker = "borough.test.marker"
	// TestMemory makes the node log its memory use every N seconds,
	// N being the value, for benchmarks.
	TestMemory = "borough.test.memory"
	// TestBootEntry makes the node write a boot entry for its own boot
	// binary that passes this parameter's value as load options, which
	// the stub takes as the kernel command line, and arm it for the next
	// boot: what an attacker with the machine can do without Secure Boot.
	TestBootEntry = "borough.test.bootentry"
	// TestCacheWrite makes the node write two blocks of the disk device
	// named by its value straight to the disk, one with a flush and one
	// without, for a test of disks that lose unflushed writes.
	TestCacheWrite = "borough.test.cachewrite"
	// TestVolume makes the node budget its data volume's space as if
	// the volume had the value's size in MiB (space.Plan): a small quota,
	// which a boot test fills in seconds.
	TestVolume = "borough.test.volume"
	// TestUnbindTPM makes the node take the TPM device from its driver
	// before it opens it, as a probe that failed at boot leaves it: the
	// device there, no driver, no /dev/tpm0.
	TestUnbindTPM = "borough.test.unbindtpm"
	// TestControl is not a parameter but the name of the virtio-serial
	// port (qemu.Options.Control) from which a test build of the node
	// takes commands while it runs, such as a step of its clock.
	TestControl = "borough.test.control"
	// TestPrefix starts every test parameter. Only these may come from
	// outside the kernel command line (MergeTest).
	TestPrefix = "borough.test."
)

// Params is a parsed command line. A parameter without '=' maps to "".
type Params map[string]string

// Read parses the command line of the running kernel.
func Read() (Params, error) {
	b, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		return nil, fmt.Errorf("reading kernel command line: %w", err)
	}
	return Parse(string(b)), nil
}

// Parse splits a command line the way the kernel does: on spaces, except
// inside double quotes, which are removed. A later parameter overrides an
// earlier one of the same name.
func Parse(s string) Params {
	p := Params{}
	for _, field := range split(s) {
		key, value, _ := strings.Cut(field, "=")
		p[key] = value
	}
	return p
}

func split(s string) []string {
	var (
		fields []string
		cur    strings.Builder
		quoted bool
		inWord bool
	)
	for _, r := range s {
		switch {
		case r == '"':
			quoted = !quoted
			inWord = true
		case !quoted && (r == ' ' || r == '\t' || r == '\n'):
			if inWord {
				fields = append(fields, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		fields = append(fields, cur.String())
	}
	return fields
}

// MergeTest adds the borough.test.* parameters of the command line s to
// p, overriding p's, and returns the names of those it ignored. Boot tests
// pass such parameters per boot through QEMU's fw_cfg.
func (p Params) MergeTest(s string) (ignored []string) {
	for key, value := range Parse(s) {
		if !strings.HasPrefix(key, TestPrefix) {
			ignored = append(ignored, key)
			continue
		}
		p[key] = value
	}
	sort.Strings(ignored)
	return ignored
}

// Has reports whether the parameter is present, with or without a value.
func (p Params) Has(key string) bool {
	_, ok := p[key]
	return ok
}
