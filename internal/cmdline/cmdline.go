// Package cmdline parses the kernel command line and names the parameters
// Borough reads from it. init parses it once and passes values down.
package cmdline

import (
	"fmt"
	"os"
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

// Has reports whether the parameter is present, with or without a value.
func (p Params) Has(key string) bool {
	_, ok := p[key]
	return ok
}
