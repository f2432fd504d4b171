package pid1

import (
	"os/exec"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestDecide(t *testing.T) {
	exited := func(code int) unix.WaitStatus { return unix.WaitStatus(code << 8) }
	killed := unix.WaitStatus(unix.SIGSEGV)
	const (
		off    = unix.LINUX_REBOOT_CMD_POWER_OFF
		reboot = unix.LINUX_REBOOT_CMD_RESTART
	)
	for _, tc := range []struct {
		name            string
		ws              unix.WaitStatus
		poweroffOnFatal bool
		want            Action
	}{
		{"poweroff", exited(ExitPoweroff), false, Action{Cmd: off}},
		{"reboot", exited(ExitReboot), false, Action{Cmd: reboot}},
		{"reboot despite debug flag", exited(ExitReboot), true, Action{Cmd: reboot}},
		{"fatal reboots after a delay", exited(ExitFatal), false, Action{Cmd: reboot, Delay: FatalDelay}},
		{"fatal with debug flag powers off", exited(ExitFatal), true, Action{Cmd: off}},
		{"exit 0 is unexpected", exited(0), false, Action{Cmd: reboot, Delay: FatalDelay,
			Reason: "fatal: node process ended unexpectedly: exit 0"}},
		{"crash", killed, true, Action{Cmd: off,
			Reason: "fatal: node process ended unexpectedly: killed by segmentation fault"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Decide(tc.ws, tc.poweroffOnFatal); got != tc.want {
				t.Errorf("Decide = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestWaitMainReapsOrphans makes this test process a child subreaper, the
// role process 1 has in the guest, and checks that an orphaned grandchild
// is reaped and reported while WaitMain waits for the main child.
func TestWaitMainReapsOrphans(t *testing.T) {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatalf("PR_SET_CHILD_SUBREAPER: %v", err)
	}
	defer unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)

	// The subshell starts a sleep and exits at once, orphaning it. The
	// main shell outlives the orphan and exits with 3.
	cmd := exec.Command("sh", "-c", `(sh -c "sleep 0.2; exit 7" &); sleep 1; exit 3`)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var orphans []unix.WaitStatus
	done := make(chan unix.WaitStatus)
	go func() {
		done <- WaitMain(cmd.Process.Pid, func(_ int, ws unix.WaitStatus) {
			orphans = append(orphans, ws)
		})
	}()
	select {
	case ws := <-done:
		if !ws.Exited() || ws.ExitStatus() != 3 {
			t.Errorf("main status = %s, want exit 3", describe(ws))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("WaitMain did not return")
	}
	if len(orphans) != 1 || orphans[0].ExitStatus() != 7 {
		t.Errorf("orphans reaped = %v, want one with exit 7", orphans)
	}
}
