// Package kmsg reads the kernel's log from /dev/kmsg, record by record,
// for the node's log tree.
//
// The kernel prints its log on the consoles itself; what it does not do is
// keep it where the owner can read it later. /dev/kmsg gives each record
// once, from the oldest the kernel still holds, with its priority and
// time: one read, one record ("6,339,5140900,-;text", then continuation
// lines of KEY=value that are dropped here). It is read directly rather
// than through a library because the format is that one line, and the
// libraries that parse it bring a syslog stack with them.
package kmsg

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Path is the kernel's log device.
const Path = "/dev/kmsg"

// maxRecord is the kernel's limit on one record (CONSOLE_EXT_LOG_MAX).
const maxRecord = 8192

// Record is one line of the kernel's log.
type Record struct {
	// Seq is the kernel's sequence number.
	Seq uint64
	// SinceBoot is CLOCK_MONOTONIC when the kernel logged the record.
	SinceBoot time.Duration
	Level     slog.Level
	Text      string
}

// Parse parses one record as read from /dev/kmsg.
func Parse(b []byte) (Record, error) {
	head, body, ok := bytes.Cut(b, []byte{';'})
	if !ok {
		return Record{}, fmt.Errorf("kernel log record %q has no ';'", b)
	}
	fields := bytes.SplitN(head, []byte{','}, 4)
	if len(fields) < 3 {
		return Record{}, fmt.Errorf("kernel log record header %q has fewer than 3 fields", head)
	}
	var nums [3]uint64
	for i := range nums {
		n, err := strconv.ParseUint(string(fields[i]), 10, 64)
		if err != nil {
			return Record{}, fmt.Errorf("kernel log record header %q: field %d: %w", head, i+1, err)
		}
		nums[i] = n
	}
	text, _, _ := bytes.Cut(body, []byte{'\n'})
	return Record{
		Seq:       nums[1],
		SinceBoot: time.Duration(nums[2]) * time.Microsecond,
		Level:     level(nums[0] & 7),
		Text:      string(text),
	}, nil
}

// level maps a syslog priority to slog's levels.
func level(prio uint64) slog.Level {
	switch {
	case prio <= 3:
		return slog.LevelError
	case prio == 4:
		return slog.LevelWarn
	case prio == 7:
		return slog.LevelDebug
	}
	return slog.LevelInfo
}

// Follow reads the kernel's log from its oldest record and calls f with
// each one until ctx ends. Records the kernel overwrote before they were
// read are skipped, and f is told how many with a warning record.
func Follow(ctx context.Context, path string, f func(Record)) error {
	// Non-blocking, so that the runtime's poller waits for records and
	// Close from another goroutine ends a read.
	file, err := os.OpenFile(path, os.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return fmt.Errorf("kernel log: %w", err)
	}
	go func() {
		<-ctx.Done()
		file.Close()
	}()
	buf := make([]byte, maxRecord)
	var last uint64
	for {
		n, err := file.Read(buf)
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, syscall.EPIPE):
			continue
		case err != nil:
			return fmt.Errorf("kernel log: %w", err)
		}
		r, err := Parse(buf[:n])
		if err != nil {
			return err
		}
		if last != 0 && r.Seq > last+1 {
			f(Record{SinceBoot: r.SinceBoot, Level: slog.LevelWarn,
				Text: fmt.Sprintf("%d kernel log records were overwritten before they were read", r.Seq-last-1)})
		}
		last = r.Seq
		f(r)
	}
}
