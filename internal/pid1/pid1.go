// Package pid1 is the part of Borough's init that runs as process 1.
//
// Process 1 inherits every orphaned process and must reap it, or it stays
// a zombie forever. A Go program cannot do that safely while it also uses
// os/exec: a wait4(-1) in a reaper goroutine steals the exit status that an
// exec.Cmd is waiting for, and Cmd.Wait then fails with ECHILD. Monogon
// solves this with a separate, tiny PID 1 (minit) that starts the real init
// as its child. Borough does the same: process 1 (init/, in the initramfs)
// runs this package once it has verified the node binary from the ESP's
// payload, starts that binary as the node process, and then does nothing
// but reap, forward signals and, when the node process ends, power off or
// reboot. The node process never sees an orphan, so its os/exec use is
// race-free.
//
// The node process tells process 1 what to do by its exit code:
// ExitPoweroff, ExitReboot or ExitFatal. Any other end (a panic, a signal)
// is fatal too. After a fatal end the machine reboots after FatalDelay,
// unless the kernel command line has cmdline.PoweroffOnFatal.
package pid1

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/borough-os/borough/internal/cmdline"
	"github.com/borough-os/borough/internal/console"
)

// Exit codes of the node process.
const (
	// ExitPoweroff asks for a clean power-off.
	ExitPoweroff = 10
	// ExitReboot asks for a clean reboot.
	ExitReboot = 11
	// ExitFatal says the node failed; it has printed the reason.
	ExitFatal = 12
)

// FatalDelay is how long a failed node waits before it reboots, so that
// the reason stays on the screen for a moment.
const FatalDelay = 5 * time.Second

// killGrace is how long processes get between SIGTERM and SIGKILL at
// shutdown.
const killGrace = 3 * time.Second

// Run starts argv as the node process, with the environment env, and never
// returns. It must be called by process 1, before it starts any other
// process. Once the node has ended, release undoes what it ran from, before
// the machine stops.
func Run(argv, env []string, release func() error) {
	log := slog.New(console.NewHandler(os.Stderr))
	// With Ctrl-Alt-Del disabled the kernel sends SIGINT to process 1
	// instead of rebooting on the spot; the node then reboots cleanly.
	if err := unix.Reboot(unix.LINUX_REBOOT_CMD_CAD_OFF); err != nil {
		log.Warn("disabling Ctrl-Alt-Del", "err", err)
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, unix.SIGINT, unix.SIGTERM)

	pid, err := syscall.ForkExec(argv[0], argv, &syscall.ProcAttr{
		Env:   env,
		Files: []uintptr{0, 1, 2},
	})
	if err != nil {
		log.Error("starting node process", "path", argv[0], "err", err)
		halt(log, Action{Cmd: unix.LINUX_REBOOT_CMD_RESTART, Delay: FatalDelay}, release)
	}
	go forward(sigs, pid)

	status := WaitMain(pid, func(orphan int, ws unix.WaitStatus) {
		log.Info("reaped orphan", "pid", orphan, "status", describe(ws))
	})
	log = slog.New(console.NewHandler(console.Open(os.Stderr)))
	params, err := cmdline.Read()
	if err != nil {
		log.Warn("deciding how to stop", "err", err)
	}
	action := Decide(status, params.Has(cmdline.PoweroffOnFatal))
	if action.Reason != "" {
		log.Error(action.Reason)
	}
	halt(log, action, release)
}

// forward passes SIGINT (Ctrl-Alt-Del) and SIGTERM on to the node process.
func forward(sigs <-chan os.Signal, pid int) {
	for s := range sigs {
		_ = unix.Kill(pid, s.(syscall.Signal))
	}
}

// WaitMain reaps children until main has ended and returns main's status.
// Every other child reaped on the way is passed to orphan.
func WaitMain(main int, orphan func(pid int, ws unix.WaitStatus)) unix.WaitStatus {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			// ECHILD: main is gone without us seeing it, which cannot
			// happen for our own child; report it as killed.
			return unix.WaitStatus(unix.SIGKILL)
		}
		if pid == main {
			return ws
		}
		orphan(pid, ws)
	}
}

func describe(ws unix.WaitStatus) string {
	switch {
	case ws.Exited():
		return fmt.Sprintf("exit %d", ws.ExitStatus())
	case ws.Signaled():
		return "killed by " + ws.Signal().String()
	default:
		return fmt.Sprintf("wait status %#x", uint32(ws))
	}
}

// Action is what process 1 does once the node process has ended.
type Action struct {
	// Cmd is the reboot(2) command: LINUX_REBOOT_CMD_POWER_OFF or
	// LINUX_REBOOT_CMD_RESTART.
	Cmd int
	// Delay is how long to wait first.
	Delay time.Duration
	// Reason, if set, is printed before stopping.
	Reason string
}

// Decide maps the node process's end to an Action.
func Decide(ws unix.WaitStatus, poweroffOnFatal bool) Action {
	fatal := Action{Cmd: unix.LINUX_REBOOT_CMD_RESTART, Delay: FatalDelay}
	if poweroffOnFatal {
		fatal = Action{Cmd: unix.LINUX_REBOOT_CMD_POWER_OFF}
	}
	switch {
	case ws.Exited() && ws.ExitStatus() == ExitPoweroff:
		return Action{Cmd: unix.LINUX_REBOOT_CMD_POWER_OFF}
	case ws.Exited() && ws.ExitStatus() == ExitReboot:
		return Action{Cmd: unix.LINUX_REBOOT_CMD_RESTART}
	case ws.Exited() && ws.ExitStatus() == ExitFatal:
		return fatal
	default:
		fatal.Reason = "fatal: node process ended unexpectedly: " + describe(ws)
		return fatal
	}
}

// Fail reports a fatal error found by process 1 before there is a node
// process, and stops the machine as after a fatal node exit. It does not
// return.
func Fail(log *slog.Logger, err error) {
	log.Error("fatal: " + err.Error())
	params, _ := cmdline.Read()
	halt(log, Decide(unix.WaitStatus(ExitFatal<<8), params.Has(cmdline.PoweroffOnFatal)), nil)
}

// halt stops every process, calls release (if any), syncs and carries out
// a. Process 1 must never
// exit (the kernel would panic), so if reboot(2) fails it waits forever.
func halt(log *slog.Logger, a Action, release func() error) {
	word := "rebooting"
	if a.Cmd == unix.LINUX_REBOOT_CMD_POWER_OFF {
		word = "powering off"
	}
	if a.Delay > 0 {
		log.Info(fmt.Sprintf("%s in %v", word, a.Delay))
		time.Sleep(a.Delay)
	}
	killAll()
	if release != nil {
		if err := release(); err != nil {
			log.Warn("releasing what the node ran from", "err", err)
		}
	}
	unix.Sync()
	log.Info(word)
	err := unix.Reboot(a.Cmd)
	log.Error("reboot(2) failed; halting here", "err", err)
	select {}
}

// killAll sends SIGTERM to every process but this one, reaps them for up
// to killGrace, then sends SIGKILL to whatever is left.
func killAll() {
	_ = unix.Kill(-1, unix.SIGTERM)
	deadline := time.Now().Add(killGrace)
	for time.Now().Before(deadline) {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if errors.Is(err, unix.ECHILD) {
			return
		}
		if pid <= 0 {
			time.Sleep(50 * time.Millisecond)
		}
	}
	_ = unix.Kill(-1, unix.SIGKILL)
	for {
		var ws unix.WaitStatus
		if _, err := unix.Wait4(-1, &ws, 0, nil); errors.Is(err, unix.ECHILD) {
			return
		}
	}
}
