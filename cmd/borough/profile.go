package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/borough-os/borough/qemu"
	"github.com/borough-os/borough/qemu/guestprof"
)

// profileFlags are borough qemu's --profile and --symbols.
type profileFlags struct {
	report, symbols string
}

// sampleInterval is the time between samples: a boot to "node running"
// under TCG gives a few thousand.
const sampleInterval = 3 * time.Millisecond

func (p *profileFlags) register(c *cobra.Command) {
	c.Flags().StringVar(&p.report, "profile", "", "with --until: sample the virtual CPU until the line and write a report to this file")
	c.Flags().StringVar(&p.symbols, "symbols", "", "with --profile: directory with System.map, init and node (default the image's)")
}

// profiler records a boot's samples and writes their report.
type profiler struct {
	flags  profileFlags
	socket string
	kernel *guestprof.KernelSymbols
	bins   []guestprof.Binary
}

// prepare reads the symbols, so that a missing one fails before the boot,
// and gives opts a gdbstub; without --profile it returns nil.
func (p profileFlags) prepare(image string, opts *qemu.Options) (*profiler, error) {
	if p.report == "" {
		return nil, nil
	}
	dir := p.symbols
	if dir == "" {
		dir = filepath.Dir(image)
	}
	f, err := os.Open(filepath.Join(dir, "System.map"))
	if err != nil {
		return nil, fmt.Errorf("--profile needs the kernel's System.map (build.sh puts it in out/; see --symbols): %w", err)
	}
	defer f.Close()
	prof := &profiler{flags: p, socket: filepath.Join(opts.StateDir, "gdb.sock")}
	if prof.kernel, err = guestprof.ReadSystemMap(f); err != nil {
		return nil, err
	}
	for _, name := range []string{"init", "node"} {
		syms, err := guestprof.ReadGoBinary(filepath.Join(dir, name))
		if err != nil {
			return nil, fmt.Errorf("--profile: %w", err)
		}
		prof.bins = append(prof.bins, guestprof.Binary{Name: name, Symbols: syms})
	}
	opts.GDB = prof.socket
	return prof, nil
}

// start begins sampling; what it returns stops, and writes the report.
func (p *profiler) start() (stop func() error) {
	if p == nil {
		return func() error { return nil }
	}
	ctx, cancel := context.WithCancel(context.Background())
	type result struct {
		samples []guestprof.Sample
		err     error
	}
	done := make(chan result, 1)
	go func() {
		s, err := guestprof.Record(ctx, p.socket, sampleInterval)
		done <- result{s, err}
	}()
	return func() error {
		cancel()
		r := <-done
		if r.err != nil {
			return fmt.Errorf("--profile: %w", r.err)
		}
		return p.write(r.samples)
	}
}

func (p *profiler) write(samples []guestprof.Sample) error {
	if len(samples) == 0 {
		return errors.New("--profile: no samples")
	}
	r, err := guestprof.Analyze(samples, p.kernel, p.bins)
	if err != nil {
		return fmt.Errorf("--profile: %w", err)
	}
	f, err := os.Create(p.flags.report)
	if err != nil {
		return err
	}
	if err := r.Write(f, 40); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
