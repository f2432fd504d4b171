package qemu

import (
	"bufio"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"
)

func TestTail(t *testing.T) {
	numbered := func(from, to int) []string {
		var l []string
		for i := from; i <= to; i++ {
			l = append(l, fmt.Sprintf("line %d", i))
		}
		return l
	}
	join := func(parts ...[]string) string {
		var all []string
		for _, p := range parts {
			all = append(all, p...)
		}
		return strings.Join(all, "\n") + "\n"
	}
	panicked := join(numbered(1, 10), []string{"panic: failed to apply"}, numbered(12, 40))
	tests := []struct {
		name, console string
		n             int
		want          string
	}{
		{"short console", join(numbered(1, 3)), 5, join(numbered(1, 3))},
		{"last lines", join(numbered(1, 10)), 3, join(numbered(8, 10))},
		{
			"panic before the tail", panicked, 3,
			"[console lines 7-15, around a panic]\n" + join(numbered(7, 10), []string{"panic: failed to apply"}, numbered(12, 15)) +
				"[...]\n" + join(numbered(38, 40)),
		},
		{
			"panic context cut at the tail", panicked, 28,
			"[console lines 7-12, around a panic]\n" + join(numbered(7, 10), []string{"panic: failed to apply"}, numbered(12, 12)) +
				"[...]\n" + join(numbered(13, 40)),
		},
		{"panic within the tail", panicked, 35, join(numbered(6, 10), []string{"panic: failed to apply"}, numbered(12, 40))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ConsoleTail(tt.console, tt.n) + "\n"; got != tt.want {
				t.Errorf("ConsoleTail(%d) =\n%s\nwant\n%s", tt.n, got, tt.want)
			}
		})
	}
}

func TestParseBlockStats(t *testing.T) {
	for _, tc := range []struct {
		name, out string
		want      BlockStats
		err       string
	}{
		{"two disks", "\r\ndisk0: rd_bytes=4096 wr_bytes=8192 rd_operations=1 wr_operations=2 flush_operations=3 wr_total_time_ns=9 rd_total_time_ns=8\r\n" +
			"other0: rd_bytes=10 wr_bytes=20 rd_operations=30 wr_operations=40 flush_operations=50 idle_time_ns=7\r\n",
			BlockStats{ReadOps: 31, ReadBytes: 4106, WriteOps: 42, WriteBytes: 8212, FlushOps: 53}, ""},
		{"a line without counts", "pflash0: (no stats)\ndisk0: rd_bytes=1 wr_bytes=2 rd_operations=3 wr_operations=4 flush_operations=5\n",
			BlockStats{ReadOps: 3, ReadBytes: 1, WriteOps: 4, WriteBytes: 2, FlushOps: 5}, ""},
		{"no disk", "\r\n", BlockStats{}, "named no disk"},
		{"a count that is no number", "disk0: wr_operations=x\n", BlockStats{}, "wr_operations=x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseBlockStats(tc.out)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %+v, %v; want an error naming %q", got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestGuestReset(t *testing.T) {
	const restart, powerDown = "[ 9.1] reboot: Restarting system\n", "[ 9.1] reboot: Power down\n"
	for _, tc := range []struct {
		name                string
		before, since       string
		killed, interactive bool
		want                bool
	}{
		{"the guest rebooted", "", "borough: rebooting\n" + restart, false, false, true},
		{"a watchdog or a panic reset it, silently", "", "borough: node running\n", false, false, true},
		{"the guest powered off", "", "borough: powering off\n" + powerDown, false, false, false},
		{"powered off in an earlier start, reset in this one", powerDown, restart, false, false, true},
		{"the power was cut", "", "borough: node running\n", true, false, false},
		{"an interactive VM runs its resets itself", "", restart, false, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vm := &VM{console: newConsole(nil), killed: tc.killed, opts: Options{Interactive: tc.interactive}}
			_, _ = vm.console.Write([]byte(tc.before))
			vm.launchedAt = len(tc.before)
			_, _ = vm.console.Write([]byte(tc.since))
			if got := vm.guestReset(); got != tc.want {
				t.Errorf("guestReset() = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestControlAcrossReset checks that a control command whose connection
// ends with a QEMU the guest reset goes again to the next QEMU, and that
// one whose VM stops fails.
func TestControlAcrossReset(t *testing.T) {
	for _, tc := range []struct {
		name    string
		restart bool
		want    string
	}{
		{"the guest reset the machine", true, "ok: unfilled"},
		{"the VM stopped", false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			vm := &VM{opts: Options{Control: true, StateDir: dir, Logf: t.Logf}, console: newConsole(nil),
				exited: make(chan struct{}), launches: 1}
			l, err := net.Listen("unix", vm.opts.controlPath())
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			go func() {
				// The first QEMU takes the command and exits.
				c, err := l.Accept()
				if err != nil {
					return
				}
				_, _ = bufio.NewReader(c).ReadString('\n')
				c.Close()
				if !tc.restart {
					close(vm.exited)
					return
				}
				vm.mu.Lock()
				vm.launches++
				vm.mu.Unlock()
				// The next one's guest answers.
				if c, err = l.Accept(); err != nil {
					return
				}
				defer c.Close()
				if cmd, _ := bufio.NewReader(c).ReadString('\n'); cmd == "unfill\n" {
					fmt.Fprintln(c, "ok: unfilled")
				}
			}()
			got, err := vm.Control("unfill", 10*time.Second)
			if got != tc.want || (err == nil) != tc.restart {
				t.Errorf("Control = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}
