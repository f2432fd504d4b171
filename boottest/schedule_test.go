//go:build boot

package boottest

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestSchedule checks the fault schedule's order: every kind once in the
// tour, in an order the seed fixes, then draws only while time is left.
func TestSchedule(t *testing.T) {
	names := func(seed uint64, duration time.Duration, n int) []string {
		s := newSchedule(rand.New(rand.NewPCG(seed, 0)), robustnessFaults, duration)
		var out []string
		for f, ok := s.next(); ok && len(out) < n; f, ok = s.next() {
			out = append(out, f.name)
		}
		return out
	}
	kinds := len(robustnessFaults)
	for _, tc := range []struct {
		name     string
		duration time.Duration
		want     int
	}{
		{"the tour alone once the time is up", 0, kinds},
		{"draws after the tour while time is left", time.Hour, kinds + 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := names(7, tc.duration, kinds+5)
			if len(got) != tc.want {
				t.Fatalf("%d faults, want %d", len(got), tc.want)
			}
			tour := slices.Clone(got[:kinds])
			slices.Sort(tour)
			if len(slices.Compact(tour)) != kinds {
				t.Errorf("the tour %q repeats a kind, so it misses another", got[:kinds])
			}
			if again := names(7, tc.duration, kinds); !slices.Equal(again, got[:kinds]) {
				t.Errorf("the same seed drew %q, then %q", got[:kinds], again)
			}
		})
	}
	if a, b := names(1, 0, kinds), names(2, 0, kinds); slices.Equal(a, b) {
		t.Errorf("seeds 1 and 2 drew the same tour %q", a)
	}
}
