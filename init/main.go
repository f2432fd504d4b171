// Command init is Borough's PID 1.
//
// The kernel starts it from the initramfs. It says "init started", mounts
// the pseudo-filesystems, opens every console, and then loads the node: the
// node process's binary (node/, which embeds etcd and is ten times the size
// of this one) lives on the ESP, not in the initramfs, so that firmware and
// kernel need not load and unpack it before init can run. The initramfs
// names the node payload (a squashfs image of the node binary and the tools
// it runs) and carries its dm-verity root hash, so what runs is what the
// measured boot binary names: init mounts the payload through dm-verity,
// which checks each block as it is read, links its files into the root
// filesystem and runs the node (internal/payload). From there on it runs
// internal/pid1: it starts the node process (with its collector off
// until the node runs: internal/bootgc) and reaps orphans until the node
// process ends, then powers off or reboots.
package main

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/borough-os/borough/internal/bootgc"
	"github.com/borough-os/borough/internal/console"
	"github.com/borough-os/borough/internal/pid1"
	"github.com/borough-os/borough/internal/pseudofs"
	"github.com/borough-os/borough/internal/timeline"
)

func main() {
	if os.Getpid() != 1 {
		fmt.Fprintln(os.Stderr, "init: Borough's init runs as process 1; there is nothing to do here")
		os.Exit(2)
	}
	// The first line goes to /dev/console (the kernel's last console=,
	// the serial port), before the mounts that opening every console
	// needs; everything after it goes to every console.
	log := slog.New(console.NewHandler(os.Stderr))
	log.Info("init started")
	tl := timeline.New()
	tl.Mark(timeline.Init)
	if err := pseudofs.MountAll(); err != nil {
		pid1.Fail(log, fmt.Errorf("mounting pseudo-filesystems: %w", err))
	}
	log = slog.New(console.NewHandler(console.Open(os.Stderr)))
	node, err := loadNode(log, tl)
	if err != nil {
		pid1.Fail(log, fmt.Errorf("loading the node: %w", err))
	}
	if err := tl.Save(timeline.File); err != nil {
		log.Warn("saving the boot timeline for the node", "err", err)
	}
	pid1.Run([]string{node, "node"}, bootgc.Env(os.Environ()), releaseNode)
}
