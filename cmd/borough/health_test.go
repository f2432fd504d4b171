package main

import (
	"slices"
	"strings"
	"testing"
)

// TestJudge: what makes a member unhealthy beyond a port that does not
// answer, each named.
func TestJudge(t *testing.T) {
	for _, tc := range []struct {
		name string
		m    memberHealth
		want []string
	}{
		{"healthy", memberHealth{State: "Running", ClockOffset: 0.2, Lag: 3}, nil},
		{"an alarm", memberHealth{State: "Running", Alarms: []string{"NOSPACE"}}, []string{"alarms: NOSPACE"}},
		{"lagging", memberHealth{State: "Running", Lag: maxLag + 1}, []string{"raft log 1001 entries behind its leader's"}},
		{"not running", memberHealth{State: "Restarting"}, []string{"state Restarting"}},
		{"a clock ahead", memberHealth{State: "Running", ClockOffset: 2.5}, []string{"clock +2.5 s from yours"}},
		{"a clock behind", memberHealth{State: "Running", ClockOffset: -1.5}, []string{"clock -1.5 s from yours"}},
		{"an API that did not answer", memberHealth{Problems: []string{"node API: refused"}}, []string{"node API: refused"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.m.judge(defaultClockOffset)
			if !slices.Equal(tc.m.Problems, tc.want) {
				t.Errorf("problems = %q, want %q", strings.Join(tc.m.Problems, "; "), strings.Join(tc.want, "; "))
			}
		})
	}
}
