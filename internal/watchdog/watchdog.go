// Package watchdog drives the machine's hardware watchdog (/dev/watchdog):
// armed, it resets the machine unless fed in time. An update's try boot
// arms it (internal/update), so that a new system that hangs before it
// confirms itself is reset, and the firmware boots the old one.
//
// The kernel's watchdog interface is a few ioctls on a character device,
// so it is driven here with golang.org/x/sys/unix rather than a library.
package watchdog

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Path is the first hardware watchdog.
const Path = "/dev/watchdog"

// ErrNone says the machine has no watchdog the kernel drives.
var ErrNone = errors.New("no hardware watchdog")

// Dog is an armed watchdog.
type Dog struct {
	f       *os.File
	timeout time.Duration

	mu       sync.Mutex
	disarmed bool
}

// Arm opens the watchdog at path, which arms it, with the given timeout
// (rounded to seconds; the driver may pick the nearest it can do).
func Arm(path string, timeout time.Duration) (*Dog, error) {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil, ErrNone
	}
	if err != nil {
		return nil, fmt.Errorf("arming the watchdog: %w", err)
	}
	secs := int(timeout.Seconds())
	if err := unix.IoctlSetPointerInt(int(f.Fd()), unix.WDIOC_SETTIMEOUT, secs); err != nil {
		f.Close()
		return nil, fmt.Errorf("setting the watchdog's timeout to %d s: %w", secs, err)
	}
	got, err := unix.IoctlGetInt(int(f.Fd()), unix.WDIOC_GETTIMEOUT)
	if err != nil {
		got = secs
	}
	return &Dog{f: f, timeout: time.Duration(got) * time.Second}, nil
}

// Timeout is the watchdog's timeout as the driver set it.
func (d *Dog) Timeout() time.Duration { return d.timeout }

// Feed restarts the watchdog's countdown; it does nothing once the
// watchdog is disarmed.
func (d *Dog) Feed() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.disarmed {
		return nil
	}
	if _, err := d.f.Write([]byte{0}); err != nil {
		return fmt.Errorf("feeding the watchdog: %w", err)
	}
	return nil
}

// Keep feeds the watchdog until it is disarmed or deadline passes, then
// stops feeding it: past the deadline, the machine resets within a
// timeout.
func (d *Dog) Keep(deadline time.Time) {
	for ; time.Now().Before(deadline); time.Sleep(d.timeout / 3) {
		d.mu.Lock()
		disarmed := d.disarmed
		d.mu.Unlock()
		if disarmed {
			return
		}
		_ = d.Feed()
	}
}

// Disarm stops the watchdog: the "magic close" of the kernel's interface,
// a 'V' as the last write before close, which drivers honour unless built
// with NOWAYOUT. Feed writes nothing after it.
func (d *Dog) Disarm() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.disarmed = true
	_, werr := d.f.Write([]byte("V"))
	return errors.Join(werr, d.f.Close())
}
