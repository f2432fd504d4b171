package bootgc

import (
	"math"
	"os"
	"os/exec"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
)

func TestEnv(t *testing.T) {
	for _, tc := range []struct {
		name    string
		environ []string
		want    []string
	}{
		{"empty", nil, []string{"GOGC=off", "GOMEMLIMIT=50331648"}},
		{"kept", []string{"HOME=/", "TERM=linux"}, []string{"HOME=/", "TERM=linux", "GOGC=off", "GOMEMLIMIT=50331648"}},
		{"replaced", []string{"GOGC=50", "HOME=/", "GOMEMLIMIT=1GiB"}, []string{"HOME=/", "GOGC=off", "GOMEMLIMIT=50331648"}},
		{"similar names kept", []string{"GOGCX=1"}, []string{"GOGCX=1", "GOGC=off", "GOMEMLIMIT=50331648"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := slices.Clone(tc.environ)
			if got := Env(tc.environ); !slices.Equal(got, tc.want) {
				t.Errorf("Env(%q) = %q, want %q", tc.environ, got, tc.want)
			}
			if !slices.Equal(in, tc.environ) {
				t.Errorf("Env changed its argument to %q", tc.environ)
			}
		})
	}
}

// TestNodeGC starts this test binary as a node would be started and checks
// what its runtime took from Env, and what Lift leaves.
func TestNodeGC(t *testing.T) {
	if os.Getenv("BOOTGC_CHILD") == "1" {
		if p := debug.SetGCPercent(-1); p != -1 {
			t.Fatalf("the collector ran at GOGC=%d under Env, want off", p)
		}
		if l := debug.SetMemoryLimit(-1); l != Limit {
			t.Fatalf("memory limit %d under Env, want %d", l, Limit)
		}
		Lift()
		if p := debug.SetGCPercent(-1); p != 100 {
			t.Errorf("GOGC=%d after Lift, want 100", p)
		}
		if l := debug.SetMemoryLimit(-1); l != math.MaxInt64 {
			t.Errorf("memory limit %d after Lift, want none", l)
		}
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestNodeGC$", "-test.v")
	cmd.Env = append(Env(append(os.Environ(), "GOGC=200")), "BOOTGC_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS") {
		t.Fatalf("child: %v\n%s", err, out)
	}
}
