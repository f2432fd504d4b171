// Command node is the Borough node process.
//
// Process 1 (init/) starts it from a verified copy of the ESP's node
// binary, once the pseudo-filesystems are mounted. It opens every console
// for the log, reads the kernel command line once, mounts the ESP and the
// encrypted data volume (internal/storage), reads the enrolment config,
// brings up the network and runs the node's services, the cluster manager
// among them, under a supervisor until a service fails fatally or a
// power-off or reboot is requested (power button, SIGTERM, or Ctrl-Alt-Del
// as SIGINT, forwarded by process 1). It then stops the services, unmounts
// storage, syncs, and exits with the code that tells process 1 what to do.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/borough-os/borough/internal/blockdev"
	"github.com/borough-os/borough/internal/cmdline"
	"github.com/borough-os/borough/internal/console"
	"github.com/borough-os/borough/internal/fwcfg"
	"github.com/borough-os/borough/internal/pid1"
	"github.com/borough-os/borough/internal/storage"
	"github.com/borough-os/borough/internal/supervisor"
)

// Roles of this binary, chosen by its first argument.
const (
	roleNode = "node"
	// Helpers of the orphan test hook (testhooks.go).
	roleOrphaner = "test-orphaner"
	roleSleeper  = "test-sleeper"
)

// stopTimeout bounds how long services get to stop at shutdown.
const stopTimeout = 10 * time.Second

func main() {
	role := ""
	if len(os.Args) > 1 {
		role = os.Args[1]
	}
	switch role {
	case roleNode:
		os.Exit(node())
	case roleOrphaner:
		orphaner()
	case roleSleeper:
		time.Sleep(time.Second)
	default:
		fmt.Fprintln(os.Stderr, "node: Borough's init starts this program; there is nothing to do here")
		os.Exit(2)
	}
}

// node runs the node process and returns its exit code for process 1.
func node() int {
	log := slog.New(console.NewHandler(console.Open(os.Stderr)))
	params, err := cmdline.Read()
	if err != nil {
		return fatal(log, err)
	}
	if b, err := fwcfg.Read(fwcfg.TestCmdline); err == nil {
		if ignored := params.MergeTest(string(b)); len(ignored) > 0 {
			log.Warn("ignoring parameters in fw_cfg that are not test parameters", "params", strings.Join(ignored, ","))
		}
	}
	log.Info("node process started")
	logDisks(log)
	st, err := storage.Open(log.With(console.ServiceKey, "storage"))
	if err != nil {
		return fatal(log, err)
	}
	services, err := bringUp(log, params, st)
	if err != nil {
		return fatal(log, err)
	}
	code := run(log, params, services)
	if err := st.Close(); err != nil {
		log.Warn("unmounting storage", "err", err)
	}
	unix.Sync()
	return code
}

// fatal prints the reason the node cannot go on and returns the exit code
// that makes process 1 reboot (or power off).
func fatal(log *slog.Logger, err error) int {
	log.Error("fatal: " + err.Error())
	unix.Sync()
	return pid1.ExitFatal
}

func logDisks(log *slog.Logger) {
	disks, err := blockdev.List("/sys")
	if err != nil {
		log.Warn("listing disks", "err", err)
		return
	}
	if len(disks) == 0 {
		log.Warn("no disks found")
	}
	for _, d := range disks {
		log.Info("disk", "name", d.Name, "size", fmt.Sprintf("%.1fGiB", float64(d.Size)/(1<<30)))
	}
}

// run supervises the node's services (with the power button and test
// hooks) and returns the exit code for process 1 once they have stopped.
func run(log *slog.Logger, params cmdline.Params, node []supervisor.Service) int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	requests := make(chan int, 1)
	go watchSignals(log, requests)

	services := []supervisor.Service{powerButton(requests)}
	services = append(services, testHooks(params)...)
	services = append(services, node...)
	result := make(chan error, 1)
	go func() { result <- supervisor.Run(ctx, log, supervisor.Options{}, services...) }()

	select {
	case err := <-result:
		return fatal(log, err)
	case code := <-requests:
		log.Info("stopping services")
		cancel()
		select {
		case <-result:
		case <-time.After(stopTimeout):
			log.Warn("services did not stop in time", "timeout", stopTimeout)
		}
		return code
	}
}

// request asks for a shutdown; the first request wins.
func request(requests chan<- int, code int) {
	select {
	case requests <- code:
	default:
	}
}

// watchSignals turns SIGTERM into a power-off and SIGINT (Ctrl-Alt-Del,
// forwarded by process 1) into a reboot.
func watchSignals(log *slog.Logger, requests chan<- int) {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, unix.SIGTERM, unix.SIGINT)
	for s := range sigs {
		if s == unix.SIGINT {
			log.Info("Ctrl-Alt-Del: rebooting")
			request(requests, pid1.ExitReboot)
		} else {
			log.Info("SIGTERM: powering off")
			request(requests, pid1.ExitPoweroff)
		}
	}
}
