package main

import (
	"bytes"
	"io"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/cobra"
)

// TestQEMUArgs: bad command lines are refused before any VM boots.
func TestQEMUArgs(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"two images", []string{"qemu", "a.img", "b.img"}, `qemu takes one IMAGE, got ["a.img" "b.img"]`},
		{"a command without --until", []string{"qemu", "a.img", "--", "true"}, "give --until"},
		{"-- and no command", []string{"qemu", "a.img", "--until", "node running", "--"}, "nothing after --"},
		{"a bad forward", []string{"qemu", "a.img", "--until", "x", "--forward", "2379"}, `--forward "2379": want HOSTPORT:GUESTPORT`},
		{"--profile without --until", []string{"qemu", "a.img", "--profile", "p.txt"}, "give --until"},
		{"--profile without symbols", []string{"qemu", "a.img", "--until", "x", "--profile", "p.txt", "--symbols", "/nonexistent"},
			"--profile needs the kernel's System.map"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := run(tt.args, io.Discard, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("borough %s = %v, want an error containing %q", strings.Join(tt.args, " "), err, tt.want)
			}
		})
	}
}

// TestStopOnSignal terminates the test process as timeout(1) would: the
// VM's halt must run, and say why.
func TestStopOnSignal(t *testing.T) {
	var out bytes.Buffer
	cmd := &cobra.Command{}
	cmd.SetErr(&out)
	halted := make(chan struct{})
	stop := stopOnSignal(cmd, func() { close(halted) })
	defer stop()
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-halted:
	case <-time.After(10 * time.Second):
		t.Fatal("SIGTERM did not halt the VM")
	}
	if want := "terminated: powering the VM off"; !strings.Contains(out.String(), want) {
		t.Errorf("stderr %q does not say %q", out.String(), want)
	}
}
