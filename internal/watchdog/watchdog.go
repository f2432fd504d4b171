// Package watchdog drives the machine's hardware watchdog (/dev/watchdog):
// armed, it resets the machine unless fed in time. An update's try boot
// arms it (internal/update), so that a new system that hangs before it
// confirms itself is reset, and the firmware boots the old one.
//
// The kernel's watchdog interface is a few ioctls on a character device,
// so it is driven here with golang.org/x/sys/unix rather than a library.
package watchdog

import (
	"context"
	"errors"
	"fmt"
	"os"
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

// Feed restarts the watchdog's countdown.
func (d *Dog) Feed() error {
	if _, err := d.f.Write([]byte{0}); err != nil {
		return fmt.Errorf("feeding the watchdog: %w", err)
	}
	return nil
}

// Keep feeds the watchdog until ctx ends or deadline passes, then stops
// feeding it: past the deadline, the machine resets within a timeout.
func (d *Dog) Keep(ctx context.Context, deadline time.Time) {
	tick := time.NewTicker(d.timeout / 3)
	defer tick.Stop()
	for time.Now().Before(deadline) {
		_ = d.Feed()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// Disarm stops the watchdog: the "magic close" of the kernel's interface,
// a 'V' before close, which drivers honour unless built with NOWAYOUT.
func (d *Dog) Disarm() error {
	_, werr := d.f.Write([]byte("V"))
	return errors.Join(werr, d.f.Close())
}
