package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/borough-os/borough/internal/fwcfg"
	"github.com/borough-os/borough/qemu"
)

type qemuFlags struct {
	opts     qemu.Options
	disk     string
	forwards []string
	until    string
	timeout  time.Duration
	profile  profileFlags
}

func qemuCommand() *cobra.Command {
	var f qemuFlags
	c := &cobra.Command{
		Use:   "qemu IMAGE [--until LINE [-- COMMAND...]]",
		Short: "Boot a disk image in QEMU, headless, with the serial console on this terminal",
		Long: `qemu boots IMAGE under OVMF with its serial console on stdin/stdout
(Ctrl-A X quits, Ctrl-A C toggles QEMU's monitor) and exits when the guest
powers off. The image is used in place. The VM's firmware variables and TPM
state live in --state (default IMAGE.vm/) and are kept across boots.

With --until, for CI, it prints the console and waits up to --timeout for a
console line containing LINE; if the line does not come, it fails with the
console's tail. Once it has come, it runs COMMAND (given after --), if any,
while the VM runs, then powers the VM off and exits with COMMAND's status
(0 without one). For example:

  borough qemu out/borough.img --fw-cfg demo.pb --forward 2379:2379 \
      --until "node running" --timeout 3m -- etcdctl endpoint health

With --until and --profile, it samples where the virtual CPU is until the
line comes and writes a report by kernel and Go function (see
qemu/guestprof), with symbols from --symbols: for example

  borough qemu out/borough.img --fw-cfg demo.pb --net \
      --until "node running" --profile boot-profile.txt`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			command, err := splitCommand(cmd, args, f.until)
			if err != nil {
				return err
			}
			if f.until != "" {
				return runUntil(cmd, args[0], f, command)
			}
			if f.profile.report != "" {
				return errors.New("--profile samples a boot until its --until line: give --until")
			}
			return runQEMU(cmd, args[0], f)
		},
	}
	c.Flags().StringVar(&f.opts.StateDir, "state", "", "VM state directory (default IMAGE.vm)")
	c.Flags().StringVar(&f.disk, "disk", string(qemu.DiskVirtio), "disk interface: virtio, nvme or ahci")
	c.Flags().IntVar(&f.opts.MemoryMiB, "mem", 1024, "memory in MiB")
	c.Flags().IntVar(&f.opts.CPUs, "cpus", 1, "virtual CPUs")
	c.Flags().BoolVar(&f.opts.TPM, "tpm", false, "attach a TPM 2.0 (swtpm), state kept in --state")
	c.Flags().StringVar(&f.opts.FwCfg, "fw-cfg", "", "file exposed to the guest as fw_cfg "+fwcfg.Enrolment)
	c.Flags().BoolVar(&f.opts.Network, "net", false, "attach a NIC on QEMU's user-mode network")
	c.Flags().StringSliceVar(&f.forwards, "forward", nil, "forward HOSTPORT:GUESTPORT from 127.0.0.1 (repeatable)")
	c.Flags().StringVar(&f.until, "until", "", "run headless and wait for a console line containing this (for CI)")
	c.Flags().DurationVar(&f.timeout, "timeout", 2*time.Minute, "with --until: how long to wait for the line")
	f.profile.register(c)
	c.AddCommand(qemuClusterCommand())
	return c
}

// splitCommand returns the command after --, which only --until takes.
func splitCommand(cmd *cobra.Command, args []string, until string) ([]string, error) {
	dash := cmd.ArgsLenAtDash()
	switch {
	case dash < 0 && len(args) > 1, dash > 1:
		return nil, fmt.Errorf("qemu takes one IMAGE, got %q (a command to run goes after --)", args)
	case dash >= 0 && until == "":
		return nil, fmt.Errorf("a command after -- runs once the --until line has come: give --until")
	case dash >= 0 && len(args) == dash:
		return nil, fmt.Errorf("nothing after --: give the command to run, or leave out --")
	case dash >= 0:
		return args[dash:], nil
	}
	return nil, nil
}

// runUntil boots the VM headless, waits for the --until line, runs
// command, and powers the VM off.
func runUntil(cmd *cobra.Command, image string, f qemuFlags, command []string) error {
	opts, err := vmOptions(cmd, image, f)
	if err != nil {
		return err
	}
	opts.Console = cmd.OutOrStdout()
	prof, err := f.profile.prepare(image, &opts)
	if err != nil {
		return err
	}
	vm, err := qemu.Start(context.Background(), opts)
	if err != nil {
		return err
	}
	var once sync.Once
	halt := func() { once.Do(func() { stopVM(cmd, vm) }) }
	defer halt()
	defer stopOnSignal(cmd, halt)()
	record := prof.start()
	_, err = vm.WaitFor(f.until, f.timeout)
	if err := errors.Join(err, record()); err != nil {
		return err
	}
	if len(command) == 0 {
		return nil
	}
	run := exec.Command(command[0], command[1:]...)
	run.Stdin, run.Stdout, run.Stderr = os.Stdin, cmd.OutOrStdout(), cmd.ErrOrStderr()
	if err := run.Run(); err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return &exitError{code: exit.ExitCode(), err: fmt.Errorf("%s: %w", strings.Join(command, " "), err)}
		}
		return fmt.Errorf("running %s: %w", command[0], err)
	}
	return nil
}

// stopOnSignal calls halt when the program is interrupted or terminated
// (as by timeout(1) in CI), so that the VM is powered off and does not
// outlive it holding the image; it returns what stops watching.
func stopOnSignal(cmd *cobra.Command, halt func()) (stop func()) {
	sigs, done := make(chan os.Signal, 1), make(chan struct{})
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		select {
		case s := <-sigs:
			fmt.Fprintf(cmd.ErrOrStderr(), "borough qemu: %v: powering the VM off\n", s)
			halt()
		case <-done:
		}
	}()
	return func() {
		signal.Stop(sigs)
		close(done)
	}
}

// stopVM powers the VM off, or kills it if it does not go.
func stopVM(cmd *cobra.Command, vm *qemu.VM) {
	if err := vm.PowerOff(time.Minute); err != nil {
		fmt.Fprintf(cmd.ErrOrStderr(), "borough qemu: the VM did not power off; killing it\n")
		vm.Kill()
	}
}

func runQEMU(cmd *cobra.Command, image string, f qemuFlags) error {
	opts, err := vmOptions(cmd, image, f)
	if err != nil {
		return err
	}
	opts.Interactive = true
	// QEMU owns the terminal; Ctrl-C reaches the guest, not us.
	signal.Ignore(os.Interrupt)
	vm, err := qemu.Start(context.Background(), opts)
	if err != nil {
		return err
	}
	return vm.Wait(0)
}

// vmOptions are the VM's options from the flags.
func vmOptions(cmd *cobra.Command, image string, f qemuFlags) (qemu.Options, error) {
	opts := f.opts
	opts.Image = image
	opts.Disk = qemu.Disk(f.disk)
	if opts.StateDir == "" {
		opts.StateDir = image + ".vm"
	}
	for _, s := range f.forwards {
		fw, err := parseForward(s)
		if err != nil {
			return opts, err
		}
		opts.Forwards = append(opts.Forwards, fw)
	}
	opts.Logf = func(format string, args ...any) {
		fmt.Fprintf(cmd.ErrOrStderr(), format+"\n", args...)
	}
	return opts, nil
}

func parseForward(s string) (qemu.Forward, error) {
	host, guest, ok := strings.Cut(s, ":")
	h, err1 := strconv.Atoi(host)
	g, err2 := strconv.Atoi(guest)
	if !ok || err1 != nil || err2 != nil || h <= 0 || h > 65535 || g <= 0 || g > 65535 {
		return qemu.Forward{}, fmt.Errorf("--forward %q: want HOSTPORT:GUESTPORT, e.g. 2379:2379", s)
	}
	return qemu.Forward{Host: h, Guest: g}, nil
}
