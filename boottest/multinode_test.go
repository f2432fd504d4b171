//go:build boot

package boottest

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	"github.com/borough-os/borough/internal/admin"
	"github.com/borough-os/borough/internal/nodeapi"
	"github.com/borough-os/borough/internal/pki"
	"github.com/borough-os/borough/internal/ticket"
	"github.com/borough-os/borough/proto/enrolmentpb"
	"github.com/borough-os/borough/qemu/multinode"
)

// TestMultiNode boots one three-node cluster from tickets (`borough qemu
// cluster`'s launcher) and runs every multi-node case on it, in order:
// the cluster is expensive, the cases are not. Its disks lose what a node
// did not flush when its power is cut (qemu.Options.VolatileCache), as
// drives with a write cache do, so that its power cuts are whole ones.
// make test runs it beside the other boot tests (boottest/run.sh).
func TestMultiNode(t *testing.T) {
	config := owner(t)
	c := launch(t, config, multinode.Options{Nodes: 3, Image: versionedImage(t, "1.0.0"), Cluster: "multi", TPM: true, Control: true,
		VolatileCache: true})
	m := &multi{t: t, c: c, config: config}
	t.Run("three voters", m.threeVoters)
	t.Run("bad tickets", m.badTickets)
	t.Run("leader power cut under writes", m.powerCut)
	t.Run("rogue member", m.rogueMember)
	t.Run("backup under writes", m.backupUnderWrites)
	t.Run("owner rotation", m.ownerRotation)
	t.Run("cold restart", m.coldRestart)
	t.Run("restart at a new address", m.newAddress)
	t.Run("crash while joining", m.crashWhileJoining)
	t.Run("revocation", m.revocation)
	t.Run("applications over JSON", m.applications)
	t.Run("patroni and clientv3", m.realApplications)
	t.Run("rolling update under writes", m.rollingUpdate)
	t.Run("applications through the rolling update", m.applicationsThroughUpdate)
	t.Run("support bundle", m.supportBundle)
	t.Run("dashboard under writes", m.dashboard)
	t.Run("quorum lost for good", m.quorumLost)
	t.Run("restore from a backup", m.restoreFromBackup)
	t.Run("reset a member", m.resetMember)
}

// launch launches a cluster owned by the owner whose config directory
// is config, in a temporary directory, with progress logged to t; when t
// ends it is killed, its consoles saved first if t failed. Each node's
// console goes to a file as it arrives, every boot of it one after
// another: a node's trouble may be in a boot before its last.
func launch(t *testing.T, config string, opts multinode.Options) *multinode.Cluster {
	t.Helper()
	opts.StateDir = t.TempDir()
	opts.Owner = ownerPair(t, config)
	opts.Logf = t.Logf
	consoles := &consoleFiles{dir: t.TempDir()}
	opts.Console = consoles.open
	c, err := multinode.Launch(context.Background(), opts)
	if err != nil {
		consoles.close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Kill()
		consoles.close()
		if t.Failed() {
			saveConsoles(t, c, consoles.dir)
		}
	})
	return c
}

// consoleFiles keeps each node's every boot's console in a file of dir.
type consoleFiles struct {
	dir   string
	files []*os.File
}

// open is multinode.Options.Console: node i's file, to append to. A file
// that does not open takes nothing: the console stays in the VM's memory.
func (c *consoleFiles) open(i int) io.Writer {
	f, err := os.OpenFile(consoleFile(c.dir, i), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return io.Discard
	}
	c.files = append(c.files, f)
	return f
}

func (c *consoleFiles) close() {
	for _, f := range c.files {
		f.Close()
	}
}

func consoleFile(dir string, i int) string {
	return filepath.Join(dir, fmt.Sprintf("node%d.console", i+1))
}

// saveConsoles prints the tail of each node's console and keeps the whole
// of it, every boot's from consoles (consoleFiles), under the build
// output, for a failure to be read in full.
func saveConsoles(t *testing.T, c *multinode.Cluster, consoles string) {
	dir := filepath.Join(outDir(t), "failed", t.Name())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Log(err)
	}
	for _, n := range c.Nodes {
		if n.VM == nil {
			continue
		}
		whole, err := os.ReadFile(consoleFile(consoles, n.Index))
		if err != nil {
			whole = []byte(n.VM.Console())
		}
		path := consoleFile(dir, n.Index)
		if err := os.WriteFile(path, whole, 0o644); err != nil {
			t.Log(err)
		}
		t.Logf("node%d (%s) console tail (every boot: %s):\n%s", n.Index+1, n.Name, path, n.VM.Tail(30))
	}
}

// multi is the shared cluster of TestMultiNode.
type multi struct {
	t      *testing.T
	c      *multinode.Cluster
	config string
	// backup is the cluster's backup "backup under writes" made, for
	// later cases to try.
	backup string
	// oldOwner is a copy of the owner's config directory from before
	// "owner rotation", for later cases to try the old key.
	oldOwner string
	// restored is the first node of the cluster "restore from a backup"
	// made, and rejoined the node that joined it.
	restored, rejoined *multinode.Node
	// pg is the PostgreSQL cluster and app the Go application "patroni
	// and clientv3" started; the first is watched from pgSince on.
	pg      *patroni
	app     *goApp
	pgSince time.Time
}

func (m *multi) owner(t *testing.T) tls.Certificate {
	return ownerPair(t, m.config)
}

// client connects as the owner through the given nodes only.
func (m *multi) client(t *testing.T, nodes ...*multinode.Node) *clientv3.Client {
	t.Helper()
	var eps []string
	for _, n := range nodes {
		eps = append(eps, n.Endpoint())
	}
	cl, err := admin.Connect(eps, m.c.CA, m.owner(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

func timeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// voters returns the names of the cluster's voters, failing on learners
// unless allowed.
func (m *multi) members(t *testing.T) (voters, learners []string) {
	t.Helper()
	list, err := m.client(t, m.c.Nodes[0]).MemberList(timeout(t, 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for _, mb := range list.Members {
		if mb.IsLearner {
			learners = append(learners, mb.Name)
		} else {
			voters = append(voters, mb.Name)
		}
	}
	return voters, learners
}

func (m *multi) threeVoters(t *testing.T) {
	voters, learners := m.members(t)
	if len(voters) != 3 || len(learners) != 0 {
		t.Fatalf("members: voters %v, learners %v; want three voters", voters, learners)
	}
	for _, n := range m.c.Nodes {
		if !strings.Contains(strings.Join(voters, " "), n.Name) {
			t.Errorf("node%d (%s) is not a voter: %v", n.Index+1, n.Name, voters)
		}
	}
	ctx := timeout(t, time.Minute)
	if _, err := m.client(t, m.c.Nodes[0]).Put(ctx, "greeting", "put on node 1"); err != nil {
		t.Fatalf("put on node 1: %v", err)
	}
	get, err := m.client(t, m.c.Nodes[2]).Get(ctx, "greeting")
	if err != nil || len(get.Kvs) != 1 || string(get.Kvs[0].Value) != "put on node 1" {
		t.Fatalf("get on node 3 = %v, %v", get, err)
	}
	contains(t, "borough version NODE", cli(t, "--config", m.config, "version", m.c.Nodes[0].API(), "--fingerprint", m.c.Fingerprint),
		"node "+m.c.Nodes[0].API()+": 1.0.0 (boot slot A)")
	// etcd authentication is on: the owner is root, and so is each node's
	// own client, or the cluster would not have formed.
	if st, err := m.client(t, m.c.Nodes[1]).AuthStatus(ctx); err != nil || !st.Enabled {
		t.Errorf("etcd authentication: %v, %v; want it on", st, err)
	}
	out, err := m.etcdctl(t, m.c.Endpoints(), "member", "list")
	if err != nil || strings.Count(out, ", started, ") != 3 || strings.Count(out, ", false\n") != 3 {
		t.Errorf("etcdctl member list: %v\n%s", err, out)
	}
	status := cli(t, "--config", m.config, "status", m.c.Nodes[1].Endpoint(), "--fingerprint", m.c.Fingerprint)
	if strings.Count(status, "(voter") != 3 || !strings.Contains(status, "leader") {
		t.Errorf("borough status printed:\n%s", status)
	}
	var st struct {
		Leader  string `json:"leader"`
		Members []struct {
			Name    string `json:"name"`
			Learner bool   `json:"learner"`
		} `json:"members"`
	}
	js := cli(t, "--config", m.config, "status", m.c.Nodes[1].Endpoint(), "-o", "json")
	if err := json.Unmarshal([]byte(js), &st); err != nil || len(st.Members) != 3 || !strings.HasPrefix(st.Leader, "node-") {
		t.Errorf("borough status -o json printed (%v):\n%s", err, js)
	}
	m.checkHealth(t)
	// Node 1 bootstrapped alone, with short raft timing, and must have
	// left it before the cluster had a second voter (consensus.ErrRetime).
	if want := "restarting etcd with the cluster's raft timing"; strings.Count(m.c.Nodes[0].VM.Console(), want) != 1 {
		t.Errorf("node 1's console does not say once %q", want)
	}
}

// badTickets boots fresh nodes with tickets the cluster must refuse:
// each time the node fails with the reason, and its data partition is
// untouched. Two fresh nodes take the tickets in turns, two at a time.
func (m *multi) badTickets(t *testing.T) {
	pool := make(chan *multinode.Node, 2)
	before := map[*multinode.Node][32]byte{}
	for range cap(pool) {
		n, err := m.c.AddNode()
		if err != nil {
			t.Fatal(err)
		}
		before[n] = dataHash(t, n.Disk())
		pool <- n
	}
	ctx := context.Background()
	fresh := func(p admin.TicketParams) *enrolmentpb.Ticket {
		tk, err := m.c.Ticket(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		return tk
	}
	forged := fresh(admin.TicketParams{})
	forged.Secret[0] ^= 1
	otherCA := fresh(admin.TicketParams{})
	otherCA.CaFingerprint = "sha256:" + strings.Repeat("0", 64)
	used := m.usedTicket(t)
	// One case of each way a node is refused: its own check of the
	// config, of the join endpoint's CA, and the cluster's refusal of an
	// unknown and of a used ticket. The cluster's other reasons (expired,
	// another cluster, an unknown ID) take the node's path of the unknown
	// one, and are the in-process join tests' (internal/cluster).
	cases := []struct {
		name   string
		ticket []byte
		reason string
	}{
		{"garbage", []byte("not a ticket at all"), "field join.ticket: not a ticket"},
		{"forged secret", marshal(t, forged), "the cluster knows no such ticket"},
		{"used by another node", used, "already used by another node"},
		{"endpoint of another CA", marshal(t, otherCA), "does not present the CA"},
	}
	t.Run("refused", func(t *testing.T) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				n := <-pool
				defer func() { pool <- n }()
				cfg, err := m.c.JoinConfig(n, tc.ticket)
				if err != nil {
					t.Fatal(err)
				}
				if err := m.c.Start(ctx, n, cfg); err != nil {
					t.Fatal(err)
				}
				defer n.VM.Kill()
				expect(t, n.VM, bootTimeout, "borough: node failed: ")
				expect(t, n.VM, stepTimeout, tc.reason)
				n.VM.Kill()
				if strings.Contains(n.VM.Console(), "data volume") {
					t.Error("the node touched its data volume")
				}
				if dataHash(t, n.Disk()) != before[n] {
					t.Fatal("the data partition changed")
				}
			})
		}
	})
	// The refusals burned nothing: the ticket whose endpoint check failed
	// still admits a node (checked without using it).
	otherCA.CaFingerprint = m.c.Fingerprint
	rec, err := m.client(t, m.c.Nodes[0]).Get(timeout(t, 30*time.Second), ticket.Key(otherCA.GetId()))
	if err != nil || len(rec.Kvs) != 1 || strings.Contains(string(rec.Kvs[0].Value), "node-") {
		t.Errorf("the ticket refused for its CA was used: %v, %v", rec, err)
	}
}

// usedTicket is the ticket node 2 joined with, from its config.
func (m *multi) usedTicket(t *testing.T) []byte {
	b, err := os.ReadFile(filepath.Join(filepath.Dir(m.c.Nodes[1].Disk()), "enrolment.pb"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg enrolmentpb.Config
	if err := proto.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	return cfg.GetJoin().GetTicket()
}

func marshal(t *testing.T, m proto.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// etcdctl runs Debian's etcdctl (3.4) as the owner against endpoints,
// with the env `borough qemu cluster` prints.
func (m *multi) etcdctl(t *testing.T, endpoints []string, args ...string) (string, error) {
	return etcdctl(map[string]string{"ETCDCTL_ENDPOINTS": "https://" + strings.Join(endpoints, ",https://"),
		"ETCDCTL_CACERT": m.c.CAFile, "ETCDCTL_CERT": filepath.Join(m.config, "owner.pem"),
		"ETCDCTL_KEY": ownerKeyFile(t, m.config)}, "", args...)
}

// checkHealth checks that `borough health` finds every node of the
// cluster healthy, each with its version, state and clock.
func (m *multi) checkHealth(t *testing.T) {
	t.Helper()
	// The VMs have no NTP server: their clocks are their RTCs', set to
	// the second at boot, and drift under emulation.
	args := []string{"--config", m.config, "health", "-o", "json", "--max-clock-offset", "10s"}
	var eps []string
	for _, n := range m.c.Nodes[:3] {
		eps = append(eps, n.Endpoint())
		args = append(args, "--api", n.Name+"="+n.API())
	}
	js := cli(t, append(args, strings.Join(eps, ","))...)
	var h struct {
		Healthy bool `json:"healthy"`
		Members []struct {
			Version string  `json:"version"`
			State   string  `json:"state"`
			Clock   float64 `json:"clock_offset_seconds"`
		} `json:"members"`
	}
	if err := json.Unmarshal([]byte(js), &h); err != nil || !h.Healthy || len(h.Members) != 3 {
		t.Fatalf("borough health -o json printed (%v):\n%s", err, js)
	}
	for _, mb := range h.Members {
		if mb.Version == "" || mb.State != "Running" {
			t.Errorf("borough health says of a member: %+v", mb)
		}
	}
	m.checkMetrics(t)
}

// checkMetrics scrapes each node's metrics with a metrics credential the
// owner mints, as Prometheus would: etcd's and the node's are there.
func (m *multi) checkMetrics(t *testing.T) {
	t.Helper()
	dir := t.TempDir()
	cli(t, "--config", m.config, "owner", "metrics-credential", "prom", "--out", dir)
	cred, err := tls.LoadX509KeyPair(filepath.Join(dir, "prom.pem"), filepath.Join(dir, "prom-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	cas, _ := filepath.Glob(filepath.Join(m.config, "clusters", "*", "ca.pem"))
	if len(cas) == 0 {
		t.Fatal("no cluster CA pinned in the owner's config")
	}
	ca, err := pki.ReadCertPEM(cas[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range m.c.Nodes[:3] {
		families, err := (&nodeapi.Client{Addr: n.API(), Owner: cred, CA: ca, ServerName: n.Name}).Metrics(context.Background())
		if err != nil {
			t.Fatalf("%s: scraping its metrics with a metrics credential: %v", n.Name, err)
		}
		for _, name := range []string{"etcd_server_has_leader", "borough_node_state", "borough_escrow_needed", "borough_boot_phase_seconds"} {
			if families[name] == nil {
				t.Errorf("%s: its metrics have no %s", n.Name, name)
			}
		}
	}
}

// leader is the node that leads the cluster.
func (m *multi) leader(t *testing.T) *multinode.Node {
	t.Helper()
	l, err := m.c.Leader(timeout(t, 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return l
}
