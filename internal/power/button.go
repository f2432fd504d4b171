// Package power watches the machine's power button.
//
// Without acpid, the kernel's ACPI button driver reports a press as a
// KEY_POWER event on an evdev node named "Power Button"; QEMU's
// system_powerdown presses it. Borough reads those nodes directly.
package power

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// Linux input event constants (include/uapi/linux/input-event-codes.h).
const (
	evKey    = 0x01
	keyPower = 116
	// eventSize is sizeof(struct input_event) on 64-bit: a 16-byte
	// timeval, then type (u16), code (u16), value (s32).
	eventSize = 24
)

// ErrNoButton is returned by OpenButtons when the machine has no power
// button.
var ErrNoButton = errors.New("no power button")

// Buttons are the machine's open power buttons.
type Buttons struct {
	files []*os.File
}

// OpenButtons opens every power button. sysfs and devtmpfs must be
// mounted. A press before OpenButtons returns is not seen.
func OpenButtons() (*Buttons, error) {
	devs, err := buttons("/sys/class/input")
	if err != nil {
		return nil, err
	}
	if len(devs) == 0 {
		return nil, ErrNoButton
	}
	b := &Buttons{}
	for _, dev := range devs {
		f, err := os.Open(dev)
		if err != nil {
			b.Close()
			return nil, fmt.Errorf("opening power button: %w", err)
		}
		b.files = append(b.files, f)
	}
	return b, nil
}

// Devices names the open buttons' device nodes.
func (b *Buttons) Devices() []string {
	var names []string
	for _, f := range b.files {
		names = append(names, f.Name())
	}
	return names
}

// Close closes the buttons.
func (b *Buttons) Close() {
	for _, f := range b.files {
		f.Close()
	}
}

// Watch calls pressed each time a button is pressed, until ctx is
// cancelled or reading fails. It closes the buttons when it returns.
func (b *Buttons) Watch(ctx context.Context, pressed func()) error {
	defer b.Close()
	errs := make(chan error, len(b.files))
	for _, f := range b.files {
		go func() { errs <- readPresses(f, pressed) }()
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case err := <-errs:
		return err
	}
}

// buttons lists the /dev/input/event* nodes whose device is a power button.
func buttons(sysClass string) ([]string, error) {
	names, err := filepath.Glob(filepath.Join(sysClass, "event*", "device", "name"))
	if err != nil {
		return nil, err
	}
	var devs []string
	for _, n := range names {
		b, err := os.ReadFile(n)
		if err != nil || strings.TrimSpace(string(b)) != "Power Button" {
			continue
		}
		event := filepath.Base(filepath.Dir(filepath.Dir(n)))
		devs = append(devs, "/dev/input/"+event)
	}
	return devs, nil
}

// readPresses reads input events from r and calls pressed on each
// KEY_POWER key-down.
func readPresses(r io.Reader, pressed func()) error {
	buf := make([]byte, eventSize)
	for {
		if _, err := io.ReadFull(r, buf); err != nil {
			return fmt.Errorf("reading power button: %w", err)
		}
		typ := binary.NativeEndian.Uint16(buf[16:])
		code := binary.NativeEndian.Uint16(buf[18:])
		value := int32(binary.NativeEndian.Uint32(buf[20:]))
		if typ == evKey && code == keyPower && value == 1 {
			pressed()
		}
	}
}
