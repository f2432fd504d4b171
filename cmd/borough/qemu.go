package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/borough-os/borough/internal/fwcfg"
	"github.com/borough-os/borough/qemu"
)

type qemuFlags struct {
	opts     qemu.Options
	disk     string
	forwards []string
}

func qemuCommand() *cobra.Command {
	var f qemuFlags
	c := &cobra.Command{
		Use:   "qemu IMAGE",
		Short: "Boot a disk image in QEMU, headless, with the serial console on this terminal",
		Long: `qemu boots IMAGE under OVMF with its serial console on stdin/stdout
(Ctrl-A X quits, Ctrl-A C toggles QEMU's monitor) and exits when the guest
powers off. The image is used in place. The VM's firmware variables and TPM
state live in --state (default IMAGE.vm/) and are kept across boots.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
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
	c.AddCommand(qemuClusterCommand())
	return c
}

func runQEMU(cmd *cobra.Command, image string, f qemuFlags) error {
	opts := f.opts
	opts.Image = image
	opts.Disk = qemu.Disk(f.disk)
	if opts.StateDir == "" {
		opts.StateDir = image + ".vm"
	}
	for _, s := range f.forwards {
		fw, err := parseForward(s)
		if err != nil {
			return err
		}
		opts.Forwards = append(opts.Forwards, fw)
	}
	opts.Interactive = true
	opts.Logf = func(format string, args ...any) {
		fmt.Fprintf(cmd.ErrOrStderr(), format+"\n", args...)
	}
	// QEMU owns the terminal; Ctrl-C reaches the guest, not us.
	signal.Ignore(os.Interrupt)
	vm, err := qemu.Start(context.Background(), opts)
	if err != nil {
		return err
	}
	return vm.Wait(0)
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
