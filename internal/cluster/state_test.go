package cluster

import (
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/borough-os/borough/internal/consensus"
	"github.com/borough-os/borough/internal/console"
	"github.com/borough-os/borough/internal/espledger"
	"github.com/borough-os/borough/internal/lifecycle"
)

func TestDecide(t *testing.T) {
	member := &Record{Phase: PhaseMember, Cluster: "prod", Node: "n1", ClusterID: "c1", MemberID: "m1"}
	other := &Record{Phase: PhaseMember, Cluster: "prod", Node: "n1", ClusterID: "c2", MemberID: "m1"}
	booting := &Record{Phase: PhaseBootstrapping, Cluster: "prod", Node: "n1"}
	joiningRec := &Record{Phase: PhaseJoining, Cluster: "prod", Node: "n1"}
	removed := &Record{Phase: PhaseRemoved, Cluster: "prod", Node: "n1", ClusterID: "c1", MemberID: "m1"}
	for _, tc := range []struct {
		name       string
		esp, data  *Record
		joining    bool
		want       lifecycle.State
		wantRecord *Record
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
	member := &Record{Phase: PhaseMember, Cluster: "prod", Node: "n1", ClusterID: "c1", MemberID: "m1"}
	booting := &Record{Phase: PhaseBootstrapping, Cluster: "prod", Node: "n1"}
	for _, tc := range []struct {
		name    string
		data    *Record
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

func TestRecordRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dir", "state.json")
	if r, err := readRecord(path); r != nil || err != nil {
		t.Errorf("readRecord of a missing file = %v, %v", r, err)
	}
	want := &Record{Phase: PhaseMember, Cluster: "prod", Node: "node-0a1b2c3d", ClusterID: "8c94d1f80cf5a3e2", MemberID: "f2534c996fbe3a78"}
	if err := writeRecord(path, want); err != nil {
		t.Fatal(err)
	}
	got, err := readRecord(path)
	if err != nil || !cmp.Equal(got, want) {
		t.Errorf("readRecord = %+v, %v, want %+v", got, err, want)
	}
	if _, err := os.Stat(path + ".tmp"); !os.IsNotExist(err) {
		t.Error("a temporary file was left behind")
	}
	// Dated back, so that a rewrite shows whatever the clock's grain.
	written := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	if err := os.Chtimes(path, written, written); err != nil {
		t.Fatal(err)
	}
	if err := writeRecord(path, want); err != nil {
		t.Fatal(err)
	}
	if again, err := os.Stat(path); err != nil || !again.ModTime().Equal(written) {
		t.Errorf("writing the same record again rewrote the file (%v)", err)
	}
	good, _ := os.ReadFile(path)
	for _, tc := range []struct {
		name, content string
		damaged       bool
	}{
		{"garbage", "{", true},
		{"torn", string(good[:len(good)/2]), true},
		{"empty", "", true},
		{"version", `{"version":9}`, false},
		{"bad phase", strings.Replace(string(good), `"member"`, `"leader"`, 1), true},
		{"bad cluster", strings.Replace(string(good), `"prod"`, `"prod --force-new-cluster"`, 1), true},
		{"bad node", strings.Replace(string(good), `"node-0a1b2c3d"`, `"../etc"`, 1), true},
		{"bad ID", strings.Replace(string(good), `"8c94d1f80cf5a3e2"`, `"zz"`, 1), true},
		{"member without IDs", strings.Replace(string(good), `"8c94d1f80cf5a3e2"`, `""`, 1), true},
	} {
		os.WriteFile(path, []byte(tc.content), 0o600)
		if _, err := readRecord(path); err == nil || errors.Is(err, errDamaged) != tc.damaged {
			t.Errorf("readRecord of %s = %v, want an error (damaged: %v)", tc.name, err, tc.damaged)
		}
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
			mg.retimed = tc.retimed
			if tc.directory != nil {
				d := &directory{Cluster: "prod", Members: map[string][]string{}}
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
