package clusterhealth

import (
	"slices"
	"strings"
	"testing"

	"github.com/borough-os/borough/proto/nodepb"
)

// TestJudge: what makes a member unhealthy beyond a port that does not
// answer, each named.
func TestJudge(t *testing.T) {
	for _, tc := range []struct {
		name string
		m    Member
		want []string
	}{
		{"healthy", Member{State: "Running", ClockOffset: 0.2, Lag: 3}, nil},
		{"a corruption alarm", Member{State: "Running", Alarms: []string{"CORRUPT"}}, []string{"alarms: CORRUPT"}},
		{"the space alarm", Member{State: "Running", Alarms: []string{"NOSPACE"}, DBSize: 90 << 20, DBInUse: 89 << 20, Quota: 90 << 20, VolumeFree: 300 << 20},
			[]string{"alarms: NOSPACE (writes refused: database 90.0 MiB, 89.0 MiB in use, quota 90.0 MiB; 300.0 MiB free on its volume)"}},
		{"lagging", Member{State: "Running", Lag: MaxLag + 1}, []string{"raft log 1001 entries behind its leader's"}},
		{"not running", Member{State: "Restarting"}, []string{"state Restarting"}},
		{"a clock ahead", Member{State: "Running", ClockOffset: 2.5}, []string{"clock +2.5 s from yours"}},
		{"a clock behind", Member{State: "Running", ClockOffset: -1.5}, []string{"clock -1.5 s from yours"}},
		{"an API that did not answer", Member{Problems: []string{"node API: refused"}}, []string{"node API: refused"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.m.Judge(DefaultClockOffset)
			if !slices.Equal(tc.m.Problems, tc.want) {
				t.Errorf("problems = %q, want %q", strings.Join(tc.m.Problems, "; "), strings.Join(tc.want, "; "))
			}
		})
	}
}

// TestJudgeEscrow: a member whose running holders are fewer than it needs
// to unlock is unhealthy, and says so.
func TestJudgeEscrow(t *testing.T) {
	escrow := &nodepb.Escrow{Needed: 2, Holders: []string{"b", "c", "d"}}
	for _, tc := range []struct {
		name   string
		states map[string]string
		up     int
		want   string
	}{
		{"every holder runs", map[string]string{"b": "Running", "c": "Running", "d": "Running"}, 3, ""},
		{"as many as it needs", map[string]string{"b": "Running", "c": "Running", "d": "Locked"}, 2, ""},
		{"fewer than it needs", map[string]string{"b": "Running", "c": "Restarting"}, 1, "1 of the 3 holders of its unlock key run, 2 needed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &Cluster{Members: []Member{{Name: "a", State: "Running", Escrow: escrow}, {Name: "e", Escrow: &nodepb.Escrow{Local: true}}}}
			for name, st := range tc.states {
				h.Members = append(h.Members, Member{Name: name, State: st})
			}
			h.JudgeEscrow()
			a := h.Members[0]
			if a.HoldersUp != tc.up || strings.Join(a.Problems, "") != "" != (tc.want != "") || !strings.Contains(strings.Join(a.Problems, ""), tc.want) {
				t.Errorf("holders up %d, problems %q; want %d, %q", a.HoldersUp, a.Problems, tc.up, tc.want)
			}
			if len(h.Members[1].Problems) != 0 {
				t.Errorf("a member whose key is on its ESP: %q", h.Members[1].Problems)
			}
		})
	}
}
