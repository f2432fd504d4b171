// Package timesync sets the node's clock from NTP servers once the
// network is up, and keeps it there.
//
// A node's clock matters: it signs certificates (the cluster CA, node
// certificates, the CRL) and checks the certificates peers and the owner
// present. A machine's RTC may be years off (a dead CMOS battery says
// 2001), so the node sets its clock before it makes or checks any, from
// the NTP servers of its enrolment config, or else those DHCP offered,
// and writes the time back to the RTC so that the next boot starts close.
// The NTP client is github.com/beevik/ntp; a server's answer is checked
// (stratum, leap, root distance) by its Validate. Plain (unauthenticated)
// NTP: an attacker on the path can move the clock, which can make
// certificates look expired or not yet valid, a denial of service; it
// cannot make the node trust a key it did not trust.
package timesync

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"time"

	"github.com/beevik/ntp"
	"golang.org/x/sys/unix"
)

const (
	// queryTimeout bounds one server's answer.
	queryTimeout = 2 * time.Second
	// threshold is the smallest offset the clock is stepped for.
	threshold = 500 * time.Millisecond
	// Interval is how often Run checks the clock again.
	Interval = time.Hour
)

// Sync asks servers in turn until one answers, and steps the clock by its
// offset if that exceeds threshold. It returns the server used, the
// offset, and whether it stepped the clock.
func Sync(servers []string) (server string, offset time.Duration, stepped bool, err error) {
	var errs []error
	for _, s := range servers {
		rsp, err := ntp.QueryWithOptions(s, ntp.QueryOptions{Timeout: queryTimeout})
		if err == nil {
			err = rsp.Validate()
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", s, err))
			continue
		}
		if math.Abs(float64(rsp.ClockOffset)) < float64(threshold) {
			return s, rsp.ClockOffset, false, nil
		}
		if err := step(rsp.ClockOffset); err != nil {
			return s, rsp.ClockOffset, false, err
		}
		return s, rsp.ClockOffset, true, nil
	}
	return "", 0, false, fmt.Errorf("no NTP server answered: %w", errors.Join(errs...))
}

// step moves the system clock by offset and writes it to the RTC.
func step(offset time.Duration) error {
	ts := unix.NsecToTimespec(time.Now().Add(offset).UnixNano())
	if err := unix.ClockSettime(unix.CLOCK_REALTIME, &ts); err != nil {
		return fmt.Errorf("setting the clock: %w", err)
	}
	return writeRTC(time.Now().UTC())
}

// writeRTC sets the real-time clock (kept in UTC) to t.
func writeRTC(t time.Time) error {
	f, err := os.OpenFile("/dev/rtc0", os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("opening the RTC: %w", err)
	}
	defer f.Close()
	rtc := unix.RTCTime{
		Sec: int32(t.Second()), Min: int32(t.Minute()), Hour: int32(t.Hour()),
		Mday: int32(t.Day()), Mon: int32(t.Month()) - 1, Year: int32(t.Year()) - 1900,
	}
	if err := unix.IoctlSetRTCTime(int(f.Fd()), &rtc); err != nil {
		return fmt.Errorf("setting the RTC: %w", err)
	}
	return nil
}

// Once syncs the clock from servers at boot and logs what it did. Without
// servers, it says the clock is the RTC's.
func Once(log *slog.Logger, servers []string) {
	if len(servers) == 0 {
		log.Warn("no NTP server in the enrolment config or from DHCP: the clock is the RTC's", "now", time.Now().UTC().Format(time.RFC3339))
		return
	}
	before := time.Now().UTC()
	server, offset, stepped, err := Sync(servers)
	switch {
	case err != nil:
		log.Warn("setting the clock from NTP", "err", err, "now", before.Format(time.RFC3339))
	case stepped:
		log.Info("clock set from NTP", "server", server, "offset", offset.Round(time.Millisecond),
			"was", before.Format(time.RFC3339), "now", time.Now().UTC().Format(time.RFC3339))
	default:
		log.Info("clock agrees with NTP", "server", server, "offset", offset.Round(time.Millisecond))
	}
}

// Run keeps the clock in sync every Interval until ctx ends.
func Run(ctx context.Context, log *slog.Logger, servers []string) error {
	if len(servers) == 0 {
		return nil
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(Interval):
		}
		if server, offset, stepped, err := Sync(servers); err != nil {
			log.Warn("keeping the clock in sync", "err", err)
		} else if stepped {
			log.Info("clock stepped", "server", server, "offset", offset.Round(time.Millisecond))
		}
	}
}
