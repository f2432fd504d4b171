//go:build boroughtest

package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/borough-os/borough/internal/cmdline"
	"github.com/borough-os/borough/internal/efivar"
	"github.com/borough-os/borough/internal/storage"
	"github.com/borough-os/borough/internal/supervisor"
	"github.com/borough-os/borough/internal/update"
)

// controlPort finds the device of the virtio-serial port QEMU names
// cmdline.TestControl, or returns "" if this VM has none.
func controlPort() string {
	names, _ := filepath.Glob("/sys/class/virtio-ports/*/name")
	for _, n := range names {
		if b, err := os.ReadFile(n); err == nil && strings.TrimSpace(string(b)) == cmdline.TestControl {
			return filepath.Join("/dev", filepath.Base(filepath.Dir(n)))
		}
	}
	return ""
}

// control serves a test's commands from the control port, one per line,
// answering each with a line. A read returns nothing while the host end
// is closed, so it polls until the host connects; the port stays open
// throughout, for QEMU passes the host's bytes on only while it is.
func control(ctx context.Context) error {
	dev := controlPort()
	if dev == "" {
		return nil
	}
	f, err := os.OpenFile(dev, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("opening the control port %s: %w", dev, err)
	}
	stop := context.AfterFunc(ctx, func() { f.Close() })
	defer stop()
	log := supervisor.Logger(ctx)
	r := bufio.NewReader(f)
	var line []byte
	for ctx.Err() == nil {
		b, err := r.ReadBytes('\n')
		line = append(line, b...)
		switch {
		case errors.Is(err, io.EOF):
			time.Sleep(250 * time.Millisecond)
			continue
		case err != nil && ctx.Err() != nil:
			return nil
		case err != nil:
			return fmt.Errorf("reading the control port %s: %w", dev, err)
		}
		command := strings.TrimSpace(string(line))
		line = nil
		answer := controlCommand(command)
		log.Info("test: control", "command", command, "answer", answer)
		if _, err := fmt.Fprintln(f, answer); err != nil {
			return fmt.Errorf("answering on the control port %s: %w", dev, err)
		}
	}
	return nil
}

// controlCommand does one command and says what it did:
//
//	clock D    steps the wall clock by the duration D (e.g. -10m), as a
//	           time server's step or a wrong real-time clock would.
//	rogue A    plays a compromised member's attempt A (rogue.go).
//	fill       fills the data volume with a file of its own until the
//	           filesystem refuses, as someone else's runaway writer would.
//	unfill     deletes that file.
//	stacks     writes every goroutine's stack to the console, for a test
//	           that finds the node stuck.
//	efi drop   deletes the slots' boot entries and the boot order, as a
//	           firmware update or a flat CMOS battery does.
//	efi first S puts slot S's boot entry first in the boot order.
func controlCommand(line string) string {
	verb, arg, _ := strings.Cut(line, " ")
	switch verb {
	case "clock":
		d, err := time.ParseDuration(arg)
		if err != nil {
			return fmt.Sprintf("error: clock %q: not a duration: %v", arg, err)
		}
		now := time.Now().Add(d)
		tv := unix.NsecToTimeval(now.UnixNano())
		if err := unix.Settimeofday(&tv); err != nil {
			return fmt.Sprintf("error: stepping the clock by %v: %v", d, err)
		}
		return "ok: clock stepped by " + d.String() + " to " + now.UTC().Format(time.RFC3339)
	case "rogue":
		return rogue(arg)
	case "fill":
		return fillVolume()
	case "efi":
		return efiCommand(arg)
	case "stacks":
		buf := make([]byte, 4<<20)
		buf = buf[:runtime.Stack(buf, true)]
		os.Stderr.Write(buf)
		return fmt.Sprintf("ok: %d bytes of stacks on the console", len(buf))
	case "unfill":
		if err := os.Remove(fillFile); err != nil {
			return "error: " + err.Error()
		}
		return "ok: " + fillFile + " deleted"
	default:
		return fmt.Sprintf("error: unknown command %q (want: clock DURATION, rogue ATTEMPT, fill, unfill)", line)
	}
}

// efiCommand changes the firmware's boot entries as arg says (drop, or
// first SLOT).
func efiCommand(arg string) string {
	switch what, slot, _ := strings.Cut(arg, " "); {
	case what == "drop":
		for _, name := range []string{efivar.BootEntryName(update.A.Entry()), efivar.BootEntryName(update.B.Entry()), "BootOrder"} {
			if err := efivar.Remove(efivar.Dir, name, efivar.GlobalVariable); err != nil {
				return "error: " + err.Error()
			}
		}
		return "ok: the slots' boot entries and the boot order deleted"
	case what == "first" && (slot == string(update.A) || slot == string(update.B)):
		first := update.Slot(slot).Entry()
		order, err := efivar.BootOrder(efivar.Dir)
		if err != nil {
			return "error: " + err.Error()
		}
		order = append([]uint16{first}, slices.DeleteFunc(order, func(n uint16) bool { return n == first })...)
		if err := efivar.SetBootOrder(efivar.Dir, order); err != nil {
			return "error: " + err.Error()
		}
		return fmt.Sprintf("ok: boot order %04X", order)
	}
	return fmt.Sprintf("error: efi %q: want drop, or first A or B", arg)
}

// fillFile is the file fill writes on the data volume.
var fillFile = filepath.Join(storage.DataRoot, "test-fill")

// fillVolume writes fillFile a MiB at a time until the filesystem has no
// room left, and flushes it.
func fillVolume() string {
	f, err := os.OpenFile(fillFile, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return "error: " + err.Error()
	}
	defer f.Close()
	chunk := make([]byte, 1<<20)
	n := 0
	for ; ; n++ {
		if _, err := f.Write(chunk); errors.Is(err, unix.ENOSPC) {
			break
		} else if err != nil {
			return fmt.Sprintf("error: after %d MiB: %v", n, err)
		}
	}
	if err := f.Sync(); err != nil && !errors.Is(err, unix.ENOSPC) {
		return fmt.Sprintf("error: flushing %d MiB: %v", n, err)
	}
	return fmt.Sprintf("ok: filled %d MiB until the volume was full", n)
}
