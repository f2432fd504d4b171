// Package console writes the node's log to every kernel console.
//
// The kernel's /dev/console is only the last console= on the command line;
// printk reaches all of them, and so should Borough's log, so that an
// operator sees it on the serial port and on the screen alike. Open finds the
// active consoles in sysfs and writes to each of them. Lines carry the time
// since boot, in the kernel's own format, so that init's log and the
// kernel's interleave readably:
//
//	[    4.512345] borough: init started
package console

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// activePath lists the kernel's active consoles, separated by spaces.
const activePath = "/sys/class/tty/console/active"

// Open opens every active kernel console for writing. It needs /sys and
// /dev mounted. When no console can be opened it falls back to fallback
// (init's inherited stderr), so logging never stops.
func Open(fallback io.Writer) io.Writer {
	names, err := active()
	if err != nil {
		return fallback
	}
	var ws []io.Writer
	for _, name := range names {
		// O_NOCTTY: a console must not become PID 1's controlling
		// terminal, or its SIGHUP and SIGINT would reach init.
		f, err := os.OpenFile("/dev/"+name, os.O_WRONLY|os.O_APPEND|unix.O_NOCTTY, 0)
		if err != nil {
			continue
		}
		ws = append(ws, f)
	}
	if len(ws) == 0 {
		return fallback
	}
	return &fanout{ws: ws}
}

func active() ([]string, error) {
	b, err := os.ReadFile(activePath)
	if err != nil {
		return nil, fmt.Errorf("reading active consoles: %w", err)
	}
	names := strings.Fields(string(b))
	if len(names) == 0 {
		return nil, errors.New("no active consoles")
	}
	return names, nil
}

// fanout writes to every writer and ignores their errors: one broken
// console must not silence the others.
type fanout struct {
	mu sync.Mutex
	ws []io.Writer
}

func (f *fanout) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, w := range f.ws {
		_, _ = w.Write(p)
	}
	return len(p), nil
}
