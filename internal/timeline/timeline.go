// Package timeline records when each phase of a node's boot ended, in
// seconds since the kernel started (CLOCK_BOOTTIME, the console's clock),
// so that a node says in one line where its boot went: init, reading,
// checking and unpacking the node payload, storage, network, etcd ready,
// running. Boot time is the figure an appliance is judged by (every
// second of it is a second of a rolling update and of a cold restart),
// and a line per boot is what tells which phase to shorten.
//
// Init and the node are two processes: init saves its marks in File (on
// /run, a tmpfs) before it starts the node, which Loads them and adds its
// own.
//
// What happened before the kernel is not here: OVMF publishes no ACPI
// FPDT, and systemd-stub (unlike systemd-boot) leaves no time variables,
// so the firmware's share is measured from outside, as QEMU start to
// `init started` beside a trivial init (make bench).
package timeline

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// File is where init leaves its marks for the node.
const File = "/run/borough/timeline.json"

// Phases, in boot order.
const (
	Init           = "init"
	PayloadMounted = "payload-mounted"
	NodeRead       = "node-read"
	Node           = "node"
	Network        = "network"
	Storage        = "storage"
	EtcdReady      = "etcd-ready"
	Running        = "running"
)

// Mark is the end of a phase.
type Mark struct {
	Phase string `json:"phase"`
	// At is the time since the kernel started.
	At time.Duration `json:"at_ns"`
}

// Timeline is a boot's marks, in the order they were made.
type Timeline struct {
	mu    sync.Mutex
	marks []Mark
	now   func() time.Duration
	// reached holds a channel per phase that Reached was asked for,
	// closed by its Mark.
	reached map[string]chan struct{}
}

// New returns an empty timeline on the kernel's clock.
func New() *Timeline { return &Timeline{now: SinceBoot} }

// SinceBoot reads the kernel's CLOCK_BOOTTIME, the clock of every mark.
func SinceBoot() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// Mark records that phase ended now.
func (t *Timeline) Mark(phase string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.marks = append(t.marks, Mark{Phase: phase, At: t.now()})
	if c, ok := t.reached[phase]; ok {
		close(c)
		delete(t.reached, phase)
	}
}

// Reached returns a channel that is closed once phase is marked, at once
// if it already is.
func (t *Timeline) Reached(phase string) <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	if c, ok := t.reached[phase]; ok {
		return c
	}
	c := make(chan struct{})
	if slices.ContainsFunc(t.marks, func(m Mark) bool { return m.Phase == phase }) {
		close(c)
		return c
	}
	if t.reached == nil {
		t.reached = map[string]chan struct{}{}
	}
	t.reached[phase] = c
	return c
}

// Marks returns the marks so far.
func (t *Timeline) Marks() []Mark {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]Mark(nil), t.marks...)
}

// Save writes the marks to path, for the next process of the boot.
func (t *Timeline) Save(path string) error {
	b, err := json.Marshal(t.Marks())
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// Load returns a timeline with the marks saved at path, and an error
// saying why there are none if the file is missing or damaged: the
// node still keeps its own then.
func Load(path string) (*Timeline, error) {
	t := New()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return t, fmt.Errorf("no boot timeline from init at %s", path)
	}
	if err != nil {
		return t, err
	}
	var marks []Mark
	if err := json.Unmarshal(b, &marks); err != nil {
		return t, fmt.Errorf("the boot timeline from init at %s: %w", path, err)
	}
	t.marks = marks
	return t, nil
}

// String is the timeline in one line: each phase's end, and in brackets
// how long it took since the previous mark, in seconds.
func (t *Timeline) String() string {
	var b strings.Builder
	var prev time.Duration
	for i, m := range t.Marks() {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s=%.2f(+%.2f)", m.Phase, m.At.Seconds(), (m.At - prev).Seconds())
		prev = m.At
	}
	return b.String()
}
