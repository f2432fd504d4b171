package dashboard

import (
	"errors"
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/borough-os/borough/internal/clusterhealth"
)

func TestRender(t *testing.T) {
	at := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	health := &clusterhealth.Cluster{ClusterID: "c0ffee", Healthy: true, Members: []clusterhealth.Member{
		{Name: "node-a", Leader: true, RaftIndex: 120, Version: "1.1.0", Slot: "B", State: "Running"},
		{Name: "node-b", RaftIndex: 118, Lag: 2, Version: "1.1.0", Slot: "B", State: "Running", Problems: []string{"clock +2.0 s from yours"}},
	}}
	looks := func(puts, fsyncs, fsyncSum float64) map[string]map[string]float64 {
		return map[string]map[string]float64{"node-a": {
			"etcd_mvcc_put_total": puts, "etcd_server_leader_changes_seen_total": 1,
			"etcd_disk_wal_fsync_duration_seconds_count": fsyncs, "etcd_disk_wal_fsync_duration_seconds_sum": fsyncSum,
		}}
	}
	first := Sample{At: at, Health: health, Counters: looks(100, 10, 0.1), Logs: map[string][]string{"node-a": {"a line"}}}
	second := Sample{At: at.Add(2 * time.Second), Health: health, Counters: looks(140, 30, 0.5)}
	for _, tc := range []struct {
		name      string
		prev      *Sample
		cur       Sample
		want, not []string
	}{
		{"the first look: no rates yet", nil, first,
			[]string{"cluster c0ffee: 2 members, healthy", "node-a  voter, leader", "1.1.0 B", "a line", "clock +2.0 s from yours"}, []string{"20.0"}},
		{"the second: rates since the first", &first, second,
			[]string{"20.0", "20.0 ms"}, nil},
		{"a cluster that does not answer", nil, Sample{At: at, Err: errors.New("no quorum")},
			[]string{"the cluster does not answer: no quorum"}, []string{"MEMBER"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			Render(&b, tc.prev, tc.cur)
			for _, w := range tc.want {
				if !strings.Contains(b.String(), w) {
					t.Errorf("no %q in:\n%s", w, b.String())
				}
			}
			for _, w := range tc.not {
				if strings.Contains(b.String(), w) {
					t.Errorf("%q in:\n%s", w, b.String())
				}
			}
		})
	}
}

// TestDashboardModel: the terminal view shows each sample as it comes and
// quits on q.
func TestDashboardModel(t *testing.T) {
	d := NewModel(nil, time.Second)
	if !strings.Contains(d.View(), "looking at the cluster") {
		t.Errorf("before the first look: %q", d.View())
	}
	l := Sample{At: time.Now(), Health: &clusterhealth.Cluster{ClusterID: "c0ffee", Members: []clusterhealth.Member{{Name: "node-a"}}}}
	if _, cmd := d.Update(sampleMsg(l)); cmd == nil {
		t.Error("no next sample scheduled")
	}
	if !strings.Contains(d.View(), "node-a") || !strings.Contains(d.View(), "q quits") {
		t.Errorf("after a look: %q", d.View())
	}
	_, cmd := d.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("q")})
	if cmd == nil {
		t.Fatal("q does not quit")
	}
	if _, ok := cmd().(tea.QuitMsg); !ok {
		t.Error("q does not quit")
	}
}
