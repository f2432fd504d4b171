package cluster

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	"github.com/borough-os/borough/internal/admin"
	"github.com/borough-os/borough/internal/consensus"
	"github.com/borough-os/borough/internal/console"
	"github.com/borough-os/borough/internal/enrolment"
	"github.com/borough-os/borough/internal/espledger"
	"github.com/borough-os/borough/internal/lifecycle"
	"github.com/borough-os/borough/internal/nodestate"
	"github.com/borough-os/borough/proto/enrolmentpb"
)

// joinerEnv holds, in a child process of the test binary, the JSON of a
// joinerSpec: the child is then a joining node, not a test run.
const joinerEnv = "BOROUGH_TEST_JOINER"

// joinerSpec is what a joining node run as a child process needs.
type joinerSpec struct {
	Dir    string
	IP     string
	Ticket string // file of the marshalled ticket
	Pause  string // the join step to stop at, waiting to be killed
}

func TestMain(m *testing.M) {
	if endpoint := os.Getenv(floodEnv); endpoint != "" {
		if err := runFlood(endpoint); err != nil {
			fmt.Fprintln(os.Stderr, "flood:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if spec := os.Getenv(joinerEnv); spec != "" {
		if err := runJoiner(spec); err != nil {
			fmt.Fprintln(os.Stderr, "joiner:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runJoiner runs a node that joins with the spec's ticket, as a node's
// bring-up does, until it is killed.
func runJoiner(specJSON string) error {
	var spec joinerSpec
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
		return err
	}
	b, err := os.ReadFile(spec.Ticket)
	if err != nil {
		return err
	}
	var tk enrolmentpb.Ticket
	if err := proto.Unmarshal(b, &tk); err != nil {
		return err
	}
	data := filepath.Join(spec.Dir, "data")
	_, statErr := os.Stat(data)
	for _, d := range []string{data, filepath.Join(spec.Dir, "esp")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	e := &enrolment.Enrolment{ClusterName: tk.GetClusterName(), Ticket: &tk}
	log := slog.New(console.NewHandler(os.Stdout))
	life := lifecycle.Start(log)
	cfg := Config{
		Enrolment: e, FreshData: errors.Is(statErr, os.ErrNotExist), IP: netip.MustParseAddr(spec.IP),
		ESPRoot: filepath.Join(spec.Dir, "esp"), Ledger: espledger.Unauthenticated(filepath.Join(spec.Dir, "esp")), DataRoot: data,
		Pause: func(step string) {
			if step == spec.Pause {
				fmt.Println("paused after " + step)
				select {}
			}
		},
		// etcd's own snapshot interval, not a small volume's: a joiner
		// that caught up from the log then writes no snapshot of its
		// own, and one found in its directory came from its leader.
		VolumeSize: testVolume,
		overrides:  overrides{listenOnIP: true, snapshots: 10000},
	}
	ctx := context.Background()
	if err := Preflight(ctx, log, filepath.Join(spec.Dir, "esp"), e); err != nil {
		life.Fail(err)
	} else if err := New(log, cfg, life).Run(ctx); err != nil {
		return err
	}
	select {}
}

// joiner is a joining node in a child process.
type joiner struct {
	cmd    *exec.Cmd
	log    *logBuffer
	exited chan struct{}
}

// startJoiner starts a child process that joins at ip with ticket tk,
// in dir, stopping after step pause if it is set.
func startJoiner(t *testing.T, dir, ip string, tk *enrolmentpb.Ticket, pause string) *joiner {
	t.Helper()
	b, err := proto.Marshal(tk)
	if err != nil {
		t.Fatal(err)
	}
	ticketFile := filepath.Join(dir, "ticket.pb")
	if err := os.WriteFile(ticketFile, b, 0o600); err != nil {
		t.Fatal(err)
	}
	spec, _ := json.Marshal(joinerSpec{Dir: dir, IP: ip, Ticket: ticketFile, Pause: pause})
	j := &joiner{cmd: exec.Command(os.Args[0], "-test.run=^$"), log: &logBuffer{}, exited: make(chan struct{})}
	j.cmd.Env = append(os.Environ(), joinerEnv+"="+string(spec))
	j.cmd.Stdout, j.cmd.Stderr = j.log, j.log
	if err := j.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		j.cmd.Wait()
		close(j.exited)
	}()
	t.Cleanup(j.kill)
	return j
}

// kill cuts the child's power: SIGKILL, as a power cut stops a node
// (what it wrote and synced is on disk, the rest may be).
func (j *joiner) kill() {
	j.cmd.Process.Kill()
	<-j.exited
}

// wait waits for a line containing s; it fails at once if the child
// exits or panics instead.
func (j *joiner) wait(t *testing.T, s string) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		log := j.log.String()
		switch {
		case strings.Contains(log, s):
			return
		case strings.Contains(log, "panic"):
			t.Fatalf("the joining node panicked:\n%s", log)
		}
		select {
		case <-j.exited:
			t.Fatalf("the joining node exited (%v) before it logged %q:\n%s", j.cmd.ProcessState, s, j.log.String())
		default:
		}
	}
	t.Fatalf("the joining node did not log %q:\n%s", s, j.log.String())
}

// joinCrash is a join cut by a power loss, and what else the cut does.
type joinCrash struct {
	name string
	// step is where the first attempt is killed.
	step string
	// lose is what of etcd's data directory the cut loses, if anything
	// ("member/wal", "member/snap/db").
	lose string
	// unflushed says the cut loses the database pages etcd had not
	// flushed, as a VM's power cut does: the database no longer lists the
	// member, and its consistent index is back at 0.
	unflushed bool
	// remove says the owner removes the node while it is down.
	remove bool
}

var joinCrashes = []joinCrash{
	{name: "killed after recording", step: JoinRecorded},
	{name: "killed after admission", step: JoinAdmitted},
	{name: "killed after etcd started", step: JoinStarted},
	{name: "killed while etcd started: database without log", step: JoinStarted, lose: "member/wal"},
	{name: "killed after etcd started: log without database", step: JoinStarted, lose: "member/snap/db"},
	{name: "killed after etcd started: database pages lost", step: JoinStarted, unflushed: true},
	{name: "removed after admission while down", step: JoinAdmitted, remove: true},
	{name: "removed after etcd started while down", step: JoinStarted, remove: true},
}

// TestJoinCrash kills a joining node (a child process with real etcd)
// after each step of its join, sometimes with part of etcd's directory
// lost or with the node removed while it is down, and starts it again:
// it finishes its join and runs, with the member of its write-ahead log
// the one its record names and the cluster lists, or says it was removed;
// it never panics, and the cluster is left with no extra learner. The
// table runs twice: a joining member catching up from the leader's log,
// and one catching up from a snapshot (the leader compacts its log).
func TestJoinCrash(t *testing.T) {
	for _, tc := range []struct {
		name      string
		leader    int
		snapshots uint64
	}{
		{"log", 40, 0},
		{"snapshot", 50, 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := newJoinCrashCluster(t, tc.leader, tc.snapshots)
			for i, c := range joinCrashes {
				t.Run(c.name, func(t *testing.T) {
					j.run(t, c, "127.0.0."+strconv.Itoa(tc.leader+1+i), tc.snapshots > 0)
				})
			}
		})
	}
}

// joinCrashCluster is the one-member cluster the joining nodes join.
type joinCrashCluster struct {
	ctx   context.Context
	cl    *clientv3.Client
	owner tls.Certificate
}

func newJoinCrashCluster(t *testing.T, n int, snapshots uint64) *joinCrashCluster {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ownerCert, owner := ownerIdentity(t)
	// Its bootstrap config carries its ticket, which it claims for its key.
	founder, statement, err := admin.FounderTicket(owner, "unit")
	if err != nil {
		t.Fatal(err)
	}
	leader := startWith(t, ctx, n, &enrolment.Enrolment{ClusterName: "unit", Owner: ownerCert, FounderTicket: founder, FounderStatement: statement}, "",
		overrides{listenOnIP: true, snapshots: snapshots})
	leader.wait(t, "node running cluster=unit")
	// The leader stops before its directory goes (cleanups run last
	// registered first).
	t.Cleanup(func() {
		cancel()
		<-leader.done
	})
	ca := readCA(t, leader)
	cl, err := admin.Connect([]string{leader.ip.String() + ":2379"}, ca, owner)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	leader.admitted(t, ctx, cl, ownerCert)
	// Enough entries that a leader that snapshots compacts its log.
	for i := range 5 * snapshots {
		if _, err := cl.Put(ctx, "k"+strconv.FormatUint(i, 10), "v"); err != nil {
			t.Fatal(err)
		}
	}
	return &joinCrashCluster{ctx: ctx, cl: cl, owner: owner}
}

// run runs one crash at ip.
func (j *joinCrashCluster) run(t *testing.T, c joinCrash, ip string, bySnapshot bool) {
	ctx, cancel := context.WithTimeout(j.ctx, 3*time.Minute)
	defer cancel()
	tk, err := admin.MintTicket(ctx, j.cl, admin.TicketParams{}, j.owner)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	node := startJoiner(t, dir, ip, tk, c.step)
	node.wait(t, "paused after "+c.step)
	node.kill()
	etcd := filepath.Join(dir, "data", "etcd")
	if c.step == JoinStarted {
		snaps, _ := filepath.Glob(filepath.Join(etcd, "member", "snap", "*.snap"))
		if (len(snaps) > 0) != bySnapshot {
			t.Fatalf("the joining member caught up from a snapshot: %v, want %v (snapshot files %v)", len(snaps) > 0, bySnapshot, snaps)
		}
	}
	if c.lose != "" {
		if err := os.RemoveAll(filepath.Join(etcd, c.lose)); err != nil {
			t.Fatal(err)
		}
	}
	rec, err := nodestate.ReadRecord(dataRecordIn(dir))
	if err != nil || rec == nil {
		t.Fatalf("the node state record after the cut: %v, %v", rec, err)
	}
	if c.unflushed {
		loseUnflushed(t, filepath.Join(etcd, "member", "snap", "db"), rec.MemberID)
	}
	if c.remove {
		if _, err := admin.RemoveNode(ctx, j.cl, rec.Node, j.owner, nil); err != nil {
			t.Fatal(err)
		}
	}
	node = startJoiner(t, dir, ip, tk, "")
	if c.remove {
		node.wait(t, "node failed: removed from cluster unit")
		node.kill()
		j.checkRemoved(t, dir)
		return
	}
	node.wait(t, "node running cluster=unit")
	node.kill()
	j.checkJoined(t, dir)
}

// dataRecordIn is the data volume's node state record of the joining
// node in dir (local.dataRecord).
func dataRecordIn(dir string) string {
	return (&local{cfg: Config{DataRoot: filepath.Join(dir, "data")}}).dataRecord()
}

// checkJoined checks that the node in dir is a member whose record, log
// and the cluster agree, then removes it.
func (j *joinCrashCluster) checkJoined(t *testing.T, dir string) {
	rec, err := nodestate.ReadRecord(dataRecordIn(dir))
	if err != nil || rec == nil || rec.Phase != nodestate.PhaseMember {
		t.Fatalf("the node state record: %+v, %v; want a member's", rec, err)
	}
	d, err := consensus.Inspect(filepath.Join(dir, "data", "etcd"))
	if err != nil {
		t.Fatal(err)
	}
	if !d.WAL || nodestate.HexID(d.MemberID) != rec.MemberID {
		t.Errorf("etcd's log names member %x (log: %v), the record %s", d.MemberID, d.WAL, rec.MemberID)
	}
	list, err := j.cl.MemberList(j.ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range list.Members {
		ids = append(ids, nodestate.HexID(m.ID))
	}
	if len(ids) != 2 || !strings.Contains(strings.Join(ids, " "), rec.MemberID) {
		t.Errorf("the cluster's members are %v, want the leader and %s", ids, rec.MemberID)
	}
	if _, err := admin.RemoveNode(j.ctx, j.cl, rec.Node, j.owner, nil); err != nil {
		t.Fatal(err)
	}
	j.checkAlone(t)
}

// checkRemoved checks that the node in dir recorded its removal and that
// the cluster has no member left of it.
func (j *joinCrashCluster) checkRemoved(t *testing.T, dir string) {
	rec, err := nodestate.ReadRecord(dataRecordIn(dir))
	if err != nil || rec == nil || rec.Phase != nodestate.PhaseRemoved {
		t.Errorf("the node state record: %+v, %v; want a removed node's", rec, err)
	}
	j.checkAlone(t)
}

// checkAlone checks that the leader is the cluster's only member.
func (j *joinCrashCluster) checkAlone(t *testing.T) {
	list, err := j.cl.MemberList(j.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Members) != 1 {
		t.Errorf("the cluster has %d members after the node left, want the leader alone: %v", len(list.Members), list.Members)
	}
}

// loseUnflushed makes the etcd database at path what a power cut leaves
// when its last pages were not flushed: member (hex) missing from its
// members bucket, its consistent index back at 0.
func loseUnflushed(t *testing.T, path, member string) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *bolt.Tx) error {
		// Right after its start a member's database may not list it yet.
		if err := tx.Bucket([]byte("members")).Delete([]byte(member)); err != nil {
			return err
		}
		return tx.Bucket([]byte("meta")).Put([]byte("consistent_index"), make([]byte, 8))
	})
	if err != nil {
		t.Fatal(err)
	}
}
