package cluster

import (
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/borough-os/borough/internal/consensus"
	"github.com/borough-os/borough/internal/console"
	"github.com/borough-os/borough/internal/espledger"
	"github.com/borough-os/borough/internal/lifecycle"
	"github.com/borough-os/borough/internal/nodestate"
)

func TestDecide(t *testing.T) {
	member := &nodestate.Record{Phase: nodestate.PhaseMember, Cluster: "prod", Node: "n1", ClusterID: "c1", MemberID: "m1"}
	other := &nodestate.Record{Phase: nodestate.PhaseMember, Cluster: "prod", Node: "n1", ClusterID: "c2", MemberID: "m1"}
	booting := &nodestate.Record{Phase: nodestate.PhaseBootstrapping, Cluster: "prod", Node: "n1"}
	joiningRec := &nodestate.Record{Phase: nodestate.PhaseJoining, Cluster: "prod", Node: "n1"}
	removed := &nodestate.Record{Phase: nodestate.PhaseRemoved, Cluster: "prod", Node: "n1", ClusterID: "c1", MemberID: "m1"}
	for _, tc := range []struct {
		name       string
		esp, data  *nodestate.Record
		joining    bool
		want       lifecycle.State
		wantRecord *nodestate.Record
		wantReason string
	}{
		{"fresh", nil, nil, false, lifecycle.CreatingCluster, nil, ""},
		{"fresh, joining", nil, nil, true, lifecycle.Joining, nil, ""},
		{"crashed join", joiningRec, joiningRec, true, lifecycle.Joining, joiningRec, ""},
		{"crashed join, data record only", nil, joiningRec, true, lifecycle.Joining, joiningRec, ""},
		{"crashed join, data volume lost", joiningRec, nil, true, lifecycle.Failed, nil, "data volume with the node's key is gone"},
		{"joined, ESP behind", joiningRec, member, true, lifecycle.Restarting, member, ""},
		{"member, told to join", member, member, true, lifecycle.Restarting, member, ""},
		{"removed", removed, removed, false, lifecycle.Failed, nil, "removed from cluster prod"},
		{"removed, ESP record only", removed, member, false, lifecycle.Failed, nil, "removed from cluster prod"},
		{"removed, told to join", removed, removed, true, lifecycle.Failed, nil, "removed from cluster prod"},
		{"member", member, member, false, lifecycle.Restarting, member, ""},
		{"ESP record lost", nil, member, false, lifecycle.Restarting, member, ""},
		{"data not this node's", member, nil, false, lifecycle.Failed, nil, "not this node's"},
		{"records disagree", member, other, false, lifecycle.Failed, nil, "disagrees"},
		{"crashed bootstrap", booting, booting, false, lifecycle.CreatingCluster, booting, ""},
		{"crashed bootstrap, data record only", nil, booting, false, lifecycle.CreatingCluster, booting, ""},
		{"crashed bootstrap, ESP record only", booting, nil, false, lifecycle.CreatingCluster, booting, ""},
		{"ESP behind data", booting, member, false, lifecycle.Restarting, member, ""},
		{"data rolled back to a bootstrap", member, booting, false, lifecycle.Failed, nil, "rolled back"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := decide(tc.esp, tc.data, false, false, tc.joining)
			if d.Next != tc.want || !cmp.Equal(d.Record, tc.wantRecord) {
				t.Errorf("decide = %+v, want %s with %+v", d, tc.want, tc.wantRecord)
			}
			if tc.wantReason != "" && (d.Reason == nil || !strings.Contains(d.Reason.Error(), tc.wantReason)) {
				t.Errorf("reason = %v, want it to contain %q", d.Reason, tc.wantReason)
			}
		})
	}
}

// TestDecideDamagedESP: a damaged ESP record never outranks the data
// volume's, and alone it stops the node.
func TestDecideDamagedESP(t *testing.T) {
	member := &nodestate.Record{Phase: nodestate.PhaseMember, Cluster: "prod", Node: "n1", ClusterID: "c1", MemberID: "m1"}
	booting := &nodestate.Record{Phase: nodestate.PhaseBootstrapping, Cluster: "prod", Node: "n1"}
	for _, tc := range []struct {
		name    string
		data    *nodestate.Record
		joining bool
		want    lifecycle.State
	}{
		{"member", member, false, lifecycle.Restarting},
		{"crashed bootstrap", booting, false, lifecycle.CreatingCluster},
		{"no data record", nil, false, lifecycle.Failed},
		{"no data record, joining", nil, true, lifecycle.Failed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if d := decide(nil, tc.data, true, false, tc.joining); d.Next != tc.want {
				t.Errorf("decide = %+v, want %s", d, tc.want)
			}
		})
	}
}

// TestAlone: which starts of a member are alone, and so run with short
// raft timing (consensus.Config.Alone).
func TestAlone(t *testing.T) {
	for _, tc := range []struct {
		name      string
		mode      consensus.Mode
		directory []string // member names; nil: no directory
		retimed   bool
		want      bool
	}{
		{name: "new cluster", mode: consensus.ModeNew, want: true},
		{name: "joining", mode: consensus.ModeJoin, directory: []string{"node-1"}},
		{name: "restart, alone in the directory", mode: consensus.ModeRestart, directory: []string{"node-1"}, want: true},
		{name: "restart with a peer", mode: consensus.ModeRestart, directory: []string{"node-1", "node-2"}},
		{name: "restart, another alone in the directory", mode: consensus.ModeRestart, directory: []string{"node-2"}},
		{name: "restart without a directory", mode: consensus.ModeRestart},
		{name: "restart after retiming", mode: consensus.ModeRestart, directory: []string{"node-1"}, retimed: true},
		{name: "new cluster after retiming", mode: consensus.ModeNew, retimed: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			log := slog.New(console.NewHandler(io.Discard))
			mg := New(log, Config{DataRoot: filepath.Join(dir, "data"), ESPRoot: filepath.Join(dir, "esp"),
				Ledger: espledger.Unauthenticated(filepath.Join(dir, "esp"))}, lifecycle.Start(log))
			mg.retimed.Store(tc.retimed)
			if tc.directory != nil {
				d := &nodestate.Directory{Cluster: "prod", Members: map[string][]string{}}
				for _, n := range tc.directory {
					d.Members[n] = []string{"https://10.0.0.1:2380"}
				}
				if err := mg.writeDirectory(d); err != nil {
					t.Fatal(err)
				}
			}
			if got := mg.alone("node-1", tc.mode); got != tc.want {
				t.Errorf("alone = %v, want %v", got, tc.want)
			}
		})
	}
}
