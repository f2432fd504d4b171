// Package poll waits for what nothing announces (a member's state, a
// node's answer over the network, a line another process writes) by
// asking again at an interval until it holds, a timeout passes or the
// context ends: one way to wait for the node, the owner's tool and the
// tests, in place of a deadline loop written out at each wait.
//
// A wait that can be told (a channel, a context, a watch) waits on that
// instead; polling is for the rest.
package poll

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrNotYet is what a condition returns for "not yet" when it has no
// error of its own to say why.
var ErrNotYet = errors.New("not yet")

// Stop marks err as final: Until returns it at once, without asking
// again (a node that rolled back will not confirm).
func Stop(err error) error { return stopped{err} }

type stopped struct{ err error }

func (s stopped) Error() string { return s.err.Error() }
func (s stopped) Unwrap() error { return s.err }

// Until calls f, then again every interval, until it returns nil or an
// error marked with Stop, ctx ends or timeout passes. It returns nil once
// f does; f's error marked with Stop as it is; otherwise f's last error,
// saying how long it waited and, if ctx ended, ctx's error.
func Until(parent context.Context, timeout, interval time.Duration, f func() error) error {
	ctx, cancel := context.WithTimeout(parent, timeout)
	defer cancel()
	t := time.NewTicker(interval)
	defer t.Stop()
	start := time.Now()
	for {
		err := f()
		var stop stopped
		switch {
		case err == nil:
			return nil
		case errors.As(err, &stop):
			return stop.err
		}
		select {
		case <-ctx.Done():
			waited := time.Since(start).Round(time.Millisecond)
			if parent.Err() != nil {
				return fmt.Errorf("stopped after %v (%w): %w", waited, parent.Err(), err)
			}
			return fmt.Errorf("still after %v: %w", waited, err)
		case <-t.C:
		}
	}
}

// True adapts a condition without an error of its own for Until.
func True(cond func() bool) func() error {
	return func() error {
		if cond() {
			return nil
		}
		return ErrNotYet
	}
}
