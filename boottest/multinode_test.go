//go:build boot

package boottest

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	"github.com/borough-os/borough/esp"
	"github.com/borough-os/borough/internal/admin"
	"github.com/borough-os/borough/internal/cluster"
	"github.com/borough-os/borough/internal/escrow"
	"github.com/borough-os/borough/internal/keyspace"
	"github.com/borough-os/borough/internal/nodeapi"
	"github.com/borough-os/borough/internal/pki"
	"github.com/borough-os/borough/internal/ticket"
	"github.com/borough-os/borough/proto/enrolmentpb"
	"github.com/borough-os/borough/qemu"
	"github.com/borough-os/borough/qemu/multinode"
)

// TestMultiNode boots one three-node cluster from tickets (`borough qemu
// cluster`'s launcher) and runs every multi-node case on it, in order:
// the cluster is expensive, the cases are not.
func TestMultiNode(t *testing.T) {
	config := owner(t)
	c := launch(t, config, multinode.Options{Nodes: 3, Image: versionedImage(t, "1.0.0"), Cluster: "multi", TPM: true, Control: true})
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
	t.Run("rolling update under writes", m.rollingUpdate)
	t.Run("support bundle", m.supportBundle)
	t.Run("dashboard under writes", m.dashboard)
	t.Run("quorum lost for good", m.quorumLost)
	t.Run("restore from a backup", m.restoreFromBackup)
	t.Run("reset a member", m.resetMember)
}

// launch launches a cluster owned by the owner whose config directory
// is config, in a temporary directory, with progress logged to t; when t
// ends it is killed, its consoles saved first if t failed.
func launch(t *testing.T, config string, opts multinode.Options) *multinode.Cluster {
	t.Helper()
	opts.StateDir = t.TempDir()
	opts.Owner = ownerPair(t, config)
	opts.Logf = t.Logf
	c, err := multinode.Launch(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			saveConsoles(t, c)
		}
		c.Kill()
	})
	return c
}

// saveConsoles prints the tail of each node's console and keeps the whole
// of it under the build output, for a failure to be read in full.
func saveConsoles(t *testing.T, c *multinode.Cluster) {
	dir := filepath.Join(outDir(t), "failed", t.Name())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Log(err)
	}
	for _, n := range c.Nodes {
		if n.VM == nil {
			continue
		}
		path := filepath.Join(dir, fmt.Sprintf("node%d.console", n.Index+1))
		if err := os.WriteFile(path, []byte(n.VM.Console()), 0o644); err != nil {
			t.Log(err)
		}
		t.Logf("node%d (%s) console tail (whole: %s):\n%s", n.Index+1, n.Name, path, n.VM.Tail(30))
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
	// restored is the first node of the cluster "restore from a backup"
	// made, and rejoined the node that joined it.
	restored, rejoined *multinode.Node
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

// powerCut pulls the leader's plug while the owner writes through the
// other two nodes: writes go on, the node comes back and catches up, and
// no acknowledged write is lost.
func (m *multi) powerCut(t *testing.T) {
	leader := m.leader(t)
	var others []*multinode.Node
	for _, n := range m.c.Nodes[:3] {
		if n != leader {
			others = append(others, n)
		}
	}
	w := startWriter(t, m.client(t, others...))
	time.Sleep(3 * time.Second)
	t.Logf("pulling the plug of the leader, node%d (%s), after %d writes", leader.Index+1, leader.Name, w.count())
	leader.VM.Kill()
	cut := w.count()
	deadline := time.Now().Add(2 * time.Minute)
	for w.count() < cut+20 {
		if time.Now().After(deadline) {
			t.Fatalf("writes did not resume after the leader's power cut (%d acknowledged)", w.count())
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("writes resumed: %d acknowledged", w.count())
	if err := m.c.Restart(context.Background(), leader); err != nil {
		t.Fatal(err)
	}
	expect(t, leader.VM, bootTimeout, "borough: state New -> Restarting")
	if err := m.c.WaitRunning(leader); err != nil {
		t.Fatal(err)
	}
	m.checkWrites(t, leader, w.stop(), "on the node that lost power")
}

// checkWrites checks that every acknowledged write is on node n.
func (m *multi) checkWrites(t *testing.T, n *multinode.Node, acked []string, where string) {
	t.Helper()
	get, err := m.client(t, n).Get(timeout(t, time.Minute), "load/", clientv3.WithPrefix())
	if err != nil {
		t.Fatalf("reading the writes %s: %v", where, err)
	}
	have := map[string]bool{}
	for _, kv := range get.Kvs {
		have[string(kv.Key)] = true
	}
	lost := 0
	for _, k := range acked {
		if !have[k] {
			lost++
		}
	}
	if lost > 0 || len(acked) == 0 {
		t.Errorf("%d of %d acknowledged writes missing %s", lost, len(acked), where)
	}
}

// newAddress gives node 3 another LAN address through its node API
// (`borough node network`): it reboots to try it, gives itself a
// certificate for the new address, tells the cluster, serves again, and
// keeps it. Settings it cannot bring up it tries, and goes back.
// coldRestart cuts the power of all three nodes under writes, once the
// cluster keeps each node's unlock key: one node alone stays locked and
// says so, with its data partition untouched, until its owner sends it
// its key (borough node unlock, as for a node whose peers are gone for
// good); with a second, both run; the third follows, and no acknowledged
// write is lost.
// rogueMember plays a member compromised while running: node1, through
// the test build's rogue hook, publishes a CRL that revokes every member,
// asks node2's holders for node2's shares with a certificate it signed in
// node2's name, publishes an escrow key of its own as node2's, and a
// hand-over of the cluster to a key of its own. Every node refuses the
// CRL and the hand-over, every holder the request, and node3 the escrow
// key, which node2 puts back; the cluster takes writes throughout, and
// the cold restart that follows brings every node back.
func (m *multi) rogueMember(t *testing.T) {
	nodes := m.c.Nodes[:3]
	rogue, victim := nodes[0], nodes[1]
	awaitEscrow(t, victim)
	awaitEscrow(t, nodes[2])
	cl := m.client(t, nodes[1:]...)
	ctx := timeout(t, 5*time.Minute)
	before, err := cl.Get(ctx, keyspace.CRL)
	if err != nil || len(before.Kvs) == 0 {
		t.Fatalf("reading etcd's CRL: %v", err)
	}
	// The owner's repair: etcd's CRL back as it was, for the owner's
	// later removals to build on.
	t.Cleanup(func() {
		if _, err := cl.Put(timeout(t, time.Minute), keyspace.CRL, string(before.Kvs[0].Value)); err != nil {
			t.Errorf("putting etcd's CRL back: %v", err)
		}
	})
	w := startWriter(t, cl)
	answer, err := rogue.VM.Control("rogue crl", time.Minute)
	if err != nil || !strings.HasPrefix(answer, "ok: rogue crl: published") {
		t.Fatalf("rogue crl: %q, %v", answer, err)
	}
	t.Log(answer)
	for _, n := range nodes {
		sawLine(t, n.VM, "changes what is revoked, and carries no revocations of the owner's", time.Minute)
	}
	escrowJSON := espCopy(t, victim, esp.CUKEscrow)[esp.CUKEscrow]
	answer, err = rogue.VM.Control("rogue share "+base64.StdEncoding.EncodeToString(escrowJSON), 2*time.Minute)
	if err != nil || !strings.HasPrefix(answer, "ok: rogue share: no key of "+victim.Name) {
		t.Fatalf("rogue share: %q, %v", answer, err)
	}
	t.Log(answer)
	for _, h := range []*multinode.Node{nodes[0], nodes[2]} {
		sawLine(t, h.VM, "is not of the key "+victim.Name+" escrowed its unlock key under", time.Minute)
	}
	rogueEscrowKey(t, ctx, cl, rogue, victim, nodes[2])
	m.rogueNodeAPI(t, rogue, victim)
	m.rogueOwner(t, rogue, victim)
	if acked := w.stop(); len(acked) == 0 {
		t.Error("no write was acknowledged while the rogue member tried")
	} else {
		t.Logf("%d writes acknowledged while the rogue member tried", len(acked))
	}
}

// rogueEscrowKey has rogue publish an escrow key of its own as victim's:
// peer refuses it, victim puts its own back, and peer's escrow still
// seals victim's share to victim's key.
func rogueEscrowKey(t *testing.T, ctx context.Context, cl *clientv3.Client, rogue, victim, peer *multinode.Node) {
	t.Helper()
	own := escrowKeyOf(t, ctx, cl, victim.Name)
	answer, err := rogue.VM.Control("rogue escrowkey "+victim.Name, 2*time.Minute)
	if err != nil || !strings.HasPrefix(answer, "ok: rogue escrowkey: published") {
		t.Fatalf("rogue escrowkey: %q, %v", answer, err)
	}
	t.Log(answer)
	sawLine(t, peer.VM, "node "+victim.Name+" was admitted with another key", time.Minute)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Second) {
		now := escrowKeyOf(t, ctx, cl, victim.Name)
		if bytes.Equal(now.Key, own.Key) && bytes.Equal(now.Cert, own.Cert) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not put its escrow key back within a minute", victim.Name)
		}
	}
	var e escrow.Escrow
	if err := json.Unmarshal(espCopy(t, peer, esp.CUKEscrow)[esp.CUKEscrow], &e); err != nil {
		t.Fatal(err)
	}
	if env, ok := e.Envelope(victim.Name); !ok || !bytes.Equal(env.Key, own.Key) {
		t.Errorf("node%d's escrow seals %s's share to %x, want its own key %x", peer.Index+1, victim.Name, env.Key, own.Key)
	}
}

// rogueNodeAPI has rogue's node API present a certificate in victim's
// name: the owner's tool refuses it, and believes rogue again once it
// presents its own.
func (m *multi) rogueNodeAPI(t *testing.T, rogue, victim *multinode.Node) {
	t.Helper()
	answer, err := rogue.VM.Control("rogue nodeapi "+victim.Name, time.Minute)
	if err != nil || !strings.HasPrefix(answer, "ok: rogue nodeapi: the node API presents") {
		t.Fatalf("rogue nodeapi: %q, %v", answer, err)
	}
	t.Log(answer)
	contains(t, "node info of a node in another's name", cliFails(t, "--config", m.config, "node", "info", rogue.API(), "--fingerprint", m.c.Fingerprint),
		"refusing node "+victim.Name+", whose certificate the owner did not admit")
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(2 * time.Second) {
		out, err := exec.Command(filepath.Join(outDir(t), "bin", "borough"), "--config", m.config, "node", "info", rogue.API(),
			"--fingerprint", m.c.Fingerprint).CombinedOutput()
		if err == nil && strings.Contains(string(out), rogue.Name) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node info of %s a minute after its rogue node API stopped: %v\n%s", rogue.Name, err, out)
		}
	}
}

// escrowKeyOf is the escrow key record node published in etcd.
func escrowKeyOf(t *testing.T, ctx context.Context, cl *clientv3.Client, node string) keyspace.EscrowKey {
	t.Helper()
	resp, err := cl.Get(ctx, keyspace.EscrowKeys+node)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("reading %s's escrow key: %v", node, err)
	}
	var r keyspace.EscrowKey
	if err := json.Unmarshal(resp.Kvs[0].Value, &r); err != nil {
		t.Fatalf("%s's escrow key: %v", node, err)
	}
	return r
}

func (m *multi) coldRestart(t *testing.T) {
	nodes := m.c.Nodes[:3]
	for _, n := range nodes {
		awaitEscrow(t, n)
	}
	w := startWriter(t, m.client(t, nodes[1:]...))
	time.Sleep(3 * time.Second)
	for _, n := range nodes {
		n.VM.Kill()
	}
	acked := w.stop()
	t.Logf("pulled the plug of all three nodes after %d acknowledged writes", len(acked))
	for _, n := range nodes {
		spentTicket(t, n)
	}
	start := func(n *multinode.Node) {
		t.Helper()
		if err := m.c.Restart(context.Background(), n); err != nil {
			t.Fatal(err)
		}
	}
	before := dataHash(t, nodes[0].Disk())
	start(nodes[0])
	expect(t, nodes[0].VM, bootTimeout, "borough: unlock: warning: waiting for unlock: 0 of 1 shares")
	if dataHash(t, nodes[0].Disk()) != before {
		t.Error("the node alone changed its data partition")
	}
	contains(t, "node unlock", cli(t, "--config", m.config, "node", "unlock", nodes[0].API(), "--fingerprint", m.c.Fingerprint),
		"its cluster unlock key: it opens its data volume")
	expect(t, nodes[0].VM, bootTimeout, "the owner sent the cluster unlock key")
	contains(t, "health of a cluster without its quorum", cliFails(t, "--config", m.config, "health", nodes[0].Endpoint(),
		"--timeout", "3s"), "does not answer (no quorum, or down)")
	start(nodes[1])
	for _, n := range nodes[:2] {
		if err := m.c.WaitRunning(n); err != nil {
			t.Fatal(err)
		}
	}
	start(nodes[2])
	if err := m.c.WaitRunning(nodes[2]); err != nil {
		t.Fatal(err)
	}
	m.checkWrites(t, nodes[2], acked, "after the cold restart")
}

// spentTicket checks that n's ESP holds no ticket secret: the member
// erased the one it enrolled with (enrolment.Spend), which an offline
// attacker could otherwise claim its name with.
func spentTicket(t *testing.T, n *multinode.Node) {
	t.Helper()
	b := espCopy(t, n, esp.AppliedEnrolment)[esp.AppliedEnrolment]
	var c enrolmentpb.Config
	if err := proto.Unmarshal(b, &c); err != nil {
		t.Fatalf("node%d's applied enrolment config: %v", n.Index+1, err)
	}
	var tk enrolmentpb.Ticket
	if err := proto.Unmarshal(c.GetJoin().GetTicket(), &tk); err != nil {
		t.Fatalf("node%d's ticket: %v", n.Index+1, err)
	}
	if len(tk.GetSecret()) != 0 || len(c.GetBootstrap().GetTicketSecret()) != 0 {
		t.Errorf("node%d's ESP still holds the secret of the ticket it enrolled with", n.Index+1)
	}
}

// ownerRecovery checks that n's disk alone holds no usable key, and that
// the owner opens its volume with the owner key: the recovery keys it
// gives match the volume's header, and standard cryptsetup in a guest
// opens the volume with them.
func (m *multi) ownerRecovery(t *testing.T, n *multinode.Node) {
	t.Helper()
	bin := filepath.Join(outDir(t), "bin", "borough")
	out, err := exec.Command(bin, "recovery", "keys", n.Disk(), "--out", t.TempDir()).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "its owner opens the disk with --owner-key") {
		t.Errorf("recovery keys without the owner key, on a disk whose unlock key the cluster holds: %v\n%s", err, out)
	}
	dir := t.TempDir()
	cli(t, "recovery", "keys", n.Disk(), "--owner-key", filepath.Join(m.config, "owner-key.age"), "--out", dir)
	out = []byte(cli(t, "recovery", "volume-key", n.Disk(), "--luk", filepath.Join(dir, "luk.key"), "--cuk", filepath.Join(dir, "cuk.key"),
		"--out", filepath.Join(dir, "volume.key")))
	vm, line := openInGuest(t, n.Disk(), filepath.Join(dir, "volume.key"), string(out))
	if !slices.Contains(strings.Fields(line), "etcd") {
		t.Errorf("the volume the owner opened holds %q, want the node's etcd data among it", line)
	}
	if err := vm.Wait(powerTimeout); err != nil {
		t.Fatal(err)
	}
}

// etcdctl runs Debian's etcdctl (3.4) as the owner against endpoints,
// with the env `borough qemu cluster` prints.
func (m *multi) etcdctl(t *testing.T, endpoints []string, args ...string) (string, error) {
	cmd := exec.Command("etcdctl", args...)
	cmd.Env = append(os.Environ(), "ETCDCTL_API=3", "ETCDCTL_ENDPOINTS=https://"+strings.Join(endpoints, ",https://"),
		"ETCDCTL_CACERT="+m.c.CAFile, "ETCDCTL_CERT="+filepath.Join(m.config, "owner.pem"),
		"ETCDCTL_KEY="+ownerKeyFile(t, m.config))
	out, err := cmd.CombinedOutput()
	return string(out), err
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

// awaitEscrow waits until the cluster keeps n's unlock key: n split it
// among its peers in this boot, or got it from them, or from its owner
// while its peers were down (the peers hold it still).
func awaitEscrow(t testing.TB, n *multinode.Node) {
	t.Helper()
	for deadline := time.Now().Add(3 * time.Minute); time.Now().Before(deadline); time.Sleep(time.Second) {
		c := n.VM.Console()
		if strings.Contains(c, "borough: unlock: the cluster keeps this node's unlock key") ||
			strings.Contains(c, "borough: unlock: cluster unlock key recovered") ||
			strings.Contains(c, "borough: unlock: the owner sent the cluster unlock key") {
			return
		}
	}
	t.Fatalf("node%d: the cluster does not keep its unlock key after 3 minutes:\n%s", n.Index+1, n.VM.Tail(30))
}

func (m *multi) newAddress(t *testing.T) {
	n := m.c.Nodes[2]
	const moved = "10.77.0.33"
	out := cli(t, "--config", m.config, "node", "network", n.API(), "--fingerprint", m.c.Fingerprint,
		"--link", "mac="+qemu.UserMAC+",dhcp", "--link", "mac="+n.MAC()+",address="+moved+"/24,advertise")
	contains(t, "node network", out, "reboots to try the new network")
	expect(t, n.VM, bootTimeout, "network settings from the owner's change, on trial", "borough: state New -> Restarting",
		"the node's address changed; gave it a new certificate", "told the cluster the node's new address address="+moved)
	if err := m.c.WaitRunning(n); err != nil {
		t.Fatal(err)
	}
	expect(t, n.VM, bootTimeout, "on the owner's new network: keeping it")
	// Settings whose link is not there: the trial boot goes back.
	cli(t, "--config", m.config, "node", "network", n.API(), "--fingerprint", m.c.Fingerprint,
		"--link", "mac=52:54:00:ff:ff:ff,address=10.77.0.34/24,advertise")
	expect(t, n.VM, bootTimeout, "the owner's new network does not come up: rebooting onto the network the node had",
		"dropping it and going back to the network it had")
	if err := m.c.WaitRunning(n); err != nil {
		t.Fatal(err)
	}
	list, err := m.client(t, m.c.Nodes[0]).MemberList(timeout(t, 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for _, mb := range list.Members {
		if mb.Name == n.Name && strings.Join(mb.PeerURLs, ",") != "https://"+moved+":2380" {
			t.Errorf("%s's peer URLs are %v after its move", n.Name, mb.PeerURLs)
		}
	}
	ctx := timeout(t, time.Minute)
	if _, err := m.client(t, n).Put(ctx, "moved", "yes"); err != nil {
		t.Fatalf("put through the moved node: %v", err)
	}
	if get, err := m.client(t, m.c.Nodes[0]).Get(ctx, "moved"); err != nil || len(get.Kvs) != 1 {
		t.Fatalf("get on node 1 of a put through the moved node = %v, %v", get, err)
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

// writer puts keys one after another and keeps those acknowledged, and
// the longest time it went without an acknowledgement.
type writer struct {
	mu      sync.Mutex
	acked   []string
	lastAck time.Time
	gap     time.Duration
	done    chan struct{}
	wg      sync.WaitGroup
}

func startWriter(t *testing.T, cl *clientv3.Client) *writer {
	w := &writer{done: make(chan struct{}), lastAck: time.Now()}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		for i := 0; ; i++ {
			select {
			case <-w.done:
				return
			default:
			}
			key := fmt.Sprintf("load/%06d", i)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err := cl.Put(ctx, key, "v")
			cancel()
			if err == nil {
				w.mu.Lock()
				w.acked = append(w.acked, key)
				w.gap = max(w.gap, time.Since(w.lastAck))
				w.lastAck = time.Now()
				w.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { w.stop() })
	return w
}

func (w *writer) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.acked)
}

// longestGap is the longest time the writer went without an
// acknowledged write.
func (w *writer) longestGap() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.gap
}

// stop ends the writes and returns the acknowledged keys.
func (w *writer) stop() []string {
	select {
	case <-w.done:
	default:
		close(w.done)
	}
	w.wg.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.acked
}

// crashWhileJoining kills a joining node after each step of its join in
// turn, each boot resuming the join where the one before left it; on the
// boot after the last it finishes and becomes a voter. Its sealed unlock
// key from before the cluster took it, put back, opens nothing alone
// (oldSealedKey). Then the owner removes it while it is off (`borough
// node remove`), once the cluster keeps its unlock key: its peers refuse
// it the shares when it boots again (an older CRL put back on a holder's
// ESP notwithstanding), and it stays locked, saying why, its data
// partition untouched, which its owner still opens (ownerRecovery). A
// member removed while it runs, and says so, is the reset case's.
func (m *multi) crashWhileJoining(t *testing.T) {
	n, err := m.c.AddNode()
	if err != nil {
		t.Fatal(err)
	}
	tk, err := m.c.Ticket(context.Background(), admin.TicketParams{})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := m.c.JoinConfig(n, marshal(t, tk))
	if err != nil {
		t.Fatal(err)
	}
	var sealedCUK []byte
	for _, step := range []string{cluster.JoinRecorded, cluster.JoinAdmitted, cluster.JoinStarted} {
		n.TestParams = "borough.test.pause=" + step
		if err := m.c.Start(context.Background(), n, cfg); err != nil {
			t.Fatal(err)
		}
		expect(t, n.VM, bootTimeout, "borough: test: paused after join step "+step)
		n.VM.Kill()
		if step == cluster.JoinRecorded {
			// The sealed cluster unlock key, as it is before the
			// cluster takes it: an attacker's copy.
			sealedCUK = readESPFile(t, n.Disk(), esp.ClusterKeyEscrow)
		}
	}
	n.TestParams = ""
	if err := m.c.Start(context.Background(), n, cfg); err != nil {
		t.Fatal(err)
	}
	expect(t, n.VM, bootTimeout, "borough: state New -> Joining")
	if err := m.c.WaitRunning(n); err != nil {
		t.Fatal(err)
	}
	m.awaitVoter(t, n.Name)
	m.oldSealedKey(t, n, cfg, sealedCUK)
	awaitEscrow(t, n)
	if err := n.VM.PowerOff(powerTimeout); err != nil {
		t.Fatal(err)
	}
	holderCopy := espCopy(t, m.c.Nodes[1], esp.UnlockCRL, esp.Ledger)
	out := cli(t, "--config", m.config, "node", "remove", m.c.Nodes[0].Endpoint(), n.Name, "--fingerprint", m.c.Fingerprint)
	if !strings.Contains(out, "removed member "+n.Name) {
		t.Errorf("borough node remove printed:\n%s", out)
	}
	m.olderCRL(t, m.c.Nodes[1], holderCopy)
	before := dataHash(t, n.Disk())
	if err := m.c.Start(context.Background(), n, cfg); err != nil {
		t.Fatal(err)
	}
	line, _, err := n.VM.WaitLine("borough: unlock: warning: waiting for unlock: 0 of", bootTimeout)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(line, "is revoked: the cluster removed it") {
		t.Errorf("the removed node waits for its unlock key saying %q, want the holders' refusal", line)
	}
	if dataHash(t, n.Disk()) != before {
		t.Error("the removed node changed its data partition")
	}
	n.VM.Kill()
	m.ownerRecovery(t, n)
}

// oldSealedKey plays test (c) of the offline attacker on n, a voter:
// once the cluster keeps n's unlock key, its sealed copy from before,
// put back on the ESP while n is off, does not open n alone: n refuses
// it as from an earlier TPM epoch, erases it, and gets its key from its
// peers.
func (m *multi) oldSealedKey(t *testing.T, n *multinode.Node, cfg string, sealedCUK []byte) {
	t.Helper()
	awaitEscrow(t, n)
	if err := n.VM.PowerOff(powerTimeout); err != nil {
		t.Fatal(err)
	}
	writeESPFile(t, n.Disk(), esp.ClusterKeyEscrow, sealedCUK)
	if err := m.c.Start(context.Background(), n, cfg); err != nil {
		t.Fatal(err)
	}
	expect(t, n.VM, bootTimeout, "borough: unlock: warning: refused "+string(esp.ClusterKeyEscrow)+": it is from an earlier epoch",
		"borough: unlock: asking peers for the cluster unlock key")
	if err := m.c.WaitRunning(n); err != nil {
		t.Fatal(err)
	}
}

// espCopy reads files from the ESP of n, running: an attacker's copy of
// them. They are written durably when they change, and none changes
// while the membership stays; a read that meets a write under way is
// tried again.
func espCopy(t *testing.T, n *multinode.Node, files ...esp.File) map[esp.File][]byte {
	t.Helper()
	out := map[esp.File][]byte{}
	for _, f := range files {
		var err error
		for range 5 {
			if out[f], err = exec.Command("mtype", "-i", espTarget(t, n.Disk()), "::/"+string(f)).Output(); err == nil {
				break
			}
			time.Sleep(time.Second)
		}
		if err != nil {
			t.Fatalf("reading %s from node%d's ESP: %v", f, n.Index+1, err)
		}
	}
	return out
}

// awaitESP waits until file f on n's ESP, running, is no longer old.
func awaitESP(t *testing.T, n *multinode.Node, f esp.File, old []byte) []byte {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(2 * time.Second) {
		if b := espCopy(t, n, f)[f]; !bytes.Equal(b, old) {
			return b
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s on node%d's ESP did not change within a minute", f, n.Index+1)
		}
	}
}

// olderCRL plays test (d) of the offline attacker on h, a holder of the
// removed node's shares: its CRL copy and ledger from before the removal,
// put back while h is off, are refused as an older ledger's (h answers no
// share request until its member runs), h unlocks with its own older
// files and runs, and its member writes the latest CRL back.
func (m *multi) olderCRL(t *testing.T, h *multinode.Node, older map[esp.File][]byte) {
	t.Helper()
	latest := awaitESP(t, h, esp.UnlockCRL, older[esp.UnlockCRL])
	if err := h.VM.PowerOff(powerTimeout); err != nil {
		t.Fatal(err)
	}
	for f, b := range older {
		writeESPFile(t, h.Disk(), f, b)
	}
	if err := m.c.Restart(context.Background(), h); err != nil {
		t.Fatal(err)
	}
	expect(t, h.VM, bootTimeout, "the ESP's files are this node's own, from an earlier state",
		"no verified revocation list on the ESP: refusing share requests until the member runs",
		"refusing "+string(esp.UnlockCRL)+": only an older copy of the ledger, put back, lists it")
	if err := m.c.WaitRunning(h); err != nil {
		t.Fatal(err)
	}
	if got := awaitESP(t, h, esp.UnlockCRL, older[esp.UnlockCRL]); !bytes.Equal(got, latest) {
		t.Errorf("the holder's member wrote back a CRL of %d bytes, not the latest of %d", len(got), len(latest))
	}
}

// awaitVoter waits until the node named is a voter.
func (m *multi) awaitVoter(t *testing.T, name string) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		voters, _ := m.members(t)
		if strings.Contains(strings.Join(voters, " "), name) {
			return
		}
	}
	t.Fatalf("%s did not become a voter within a minute", name)
}

// revocation holds a certificate of the cluster CA as a stolen node's
// identity would be: the client port refuses it (it trusts the owner
// alone), the peer port accepts it; once the owner removes its node, both
// ports refuse it within 10 s.
func (m *multi) revocation(t *testing.T) {
	cl := m.client(t, m.c.Nodes[0])
	ctx := timeout(t, 2*time.Minute)
	ca, err := keyspace.ReadCA(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	const name = "node-5701e000"
	// The peer port checks the certificate's address against the
	// connection's: QEMU's user network makes the host 10.0.2.2.
	ips := []net.IP{net.IPv4(10, 0, 2, 2), net.IPv4(127, 0, 0, 1)}
	stolen, err := ca.Issue(name, ips, []string{name}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	rec, _ := keyspace.NodeRecord{Serials: []string{stolen.Cert.SerialNumber.Text(16)}}.Marshal()
	if _, err := cl.Put(ctx, keyspace.Nodes+name, string(rec)); err != nil {
		t.Fatal(err)
	}
	id := tls.Certificate{Certificate: [][]byte{stolen.Cert.Raw}, PrivateKey: stolen.Key}
	for _, n := range m.c.Nodes[:3] {
		if m.clientAccepts(n, id) {
			t.Errorf("node%d's client port accepts a node certificate", n.Index+1)
		}
		if !m.peerAccepts(n, id) {
			t.Fatalf("node%d's peer port refuses a certificate of its CA before any removal", n.Index+1)
		}
	}
	cli(t, "--config", m.config, "node", "remove", m.c.Nodes[0].Endpoint(), name, "--fingerprint", m.c.Fingerprint)
	removed := time.Now()
	var wg sync.WaitGroup
	for _, n := range m.c.Nodes[:3] {
		wg.Go(func() {
			for m.clientAccepts(n, id) || m.peerAccepts(n, id) {
				if time.Since(removed) > 10*time.Second {
					t.Errorf("node%d still accepts the revoked certificate %v after the removal", n.Index+1, time.Since(removed))
					return
				}
				time.Sleep(100 * time.Millisecond)
			}
			t.Logf("node%d refuses the revoked certificate on both ports %.1f s after the removal", n.Index+1, time.Since(removed).Seconds())
		})
	}
	wg.Wait()
}

// peerAccepts says whether n's peer port serves id its /version.
func (m *multi) peerAccepts(n *multinode.Node, id tls.Certificate) bool {
	roots := x509.NewCertPool()
	roots.AddCert(m.c.CA)
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{id}}}}
	defer hc.CloseIdleConnections()
	res, err := hc.Get(fmt.Sprintf("https://127.0.0.1:%d/version", n.PeerPort))
	if err != nil {
		return false
	}
	res.Body.Close()
	return res.StatusCode == http.StatusOK
}

// clientAccepts says whether n's client port serves id a read.
func (m *multi) clientAccepts(n *multinode.Node, id tls.Certificate) bool {
	cl, err := admin.Connect([]string{n.Endpoint()}, m.c.CA, id)
	if err != nil {
		return false
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err = cl.Get(ctx, "greeting")
	return err == nil
}

// electionBound is the longest a client may go without a write through a
// rolling update: a leadership transfer or an election (1 s timeout) and
// a request that timed out on a member going down (5 s). A member's
// reboot takes over 15 s here, so a cluster that lost quorum to one
// would show as a longer gap.
const electionBound = 10 * time.Second

// rollingUpdate updates every member from 1.0.0 to 1.1.0 with `borough
// update --cluster` while the owner writes through all three: the
// followers go first and the leader last, each confirms itself, the writes
// never stop for longer than an election, and none is lost. A node API
// address given for the wrong member is refused by its certificate first.
func (m *multi) rollingUpdate(t *testing.T) {
	nodes := m.c.Nodes[:3]
	next := signedImage(t, m.config, "1.1.0")
	var eps []string
	for _, n := range nodes {
		eps = append(eps, n.Endpoint())
	}
	args := []string{"--config", m.config, "update", "--cluster", strings.Join(eps, ","), next, "--fingerprint", m.c.Fingerprint}
	swapped := append(slices.Clone(args), "--settle", "30s", "--api", nodes[0].Name+"="+nodes[1].API(),
		"--api", nodes[1].Name+"="+nodes[0].API(), "--api", nodes[2].Name+"="+nodes[2].API())
	out := cliFails(t, swapped...)
	contains(t, "node API addresses of two members swapped", out, "x509: certificate is valid for node-")
	if strings.Contains(out, "sending") {
		t.Errorf("update --cluster sent the update through a swapped address:\n%s", out)
	}
	for _, n := range nodes {
		args = append(args, "--api", n.Name+"="+n.API())
	}
	leader := m.leader(t)
	w := startWriter(t, m.client(t, nodes...))
	out = cli(t, args...)
	acked, gap := w.stop(), w.longestGap()
	t.Logf("%d writes acknowledged through the rolling update, the longest without one %.1f s:\n%s", len(acked), gap.Seconds(), out)
	contains(t, "update --cluster", out, "all 3 members run 1.1.0; 3 updated")
	updating := regexp.MustCompile(`updating (\S+) \((\w+),`).FindAllStringSubmatch(out, -1)
	if len(updating) != 3 || updating[2][1] != leader.Name || updating[2][2] != "leader" {
		t.Errorf("update --cluster updated %v; want the two followers, then the leader %s", updating, leader.Name)
	}
	for _, n := range nodes {
		expect(t, n.VM, stepTimeout, "update confirmed: slot B runs 1.1.0 and boots by default")
	}
	if gap > electionBound {
		t.Errorf("the writes stopped for %.1f s during the rolling update; want at most %v", gap.Seconds(), electionBound)
	}
	m.checkWrites(t, nodes[0], acked, "after the rolling update")
}

// supportBundle writes a support bundle of the cluster and looks in it:
// each member's info, metrics and logs of this boot and the one before
// (the rolling update rebooted each), the cluster's health and members,
// and none of the keys the owner can read of the cluster (its CA's, the
// tickets' records) nor the owner's own.
func (m *multi) supportBundle(t *testing.T) {
	nodes := m.c.Nodes[:3]
	path := filepath.Join(t.TempDir(), "bundle.tar.zst")
	args := []string{"--config", m.config, "support", "--out", path, "--boots", "2"}
	var eps []string
	for _, n := range nodes {
		eps = append(eps, n.Endpoint())
		args = append(args, "--api", n.Name+"="+n.API())
	}
	t.Log(cli(t, append(args, strings.Join(eps, ","))...))
	files := readBundle(t, path)
	for _, name := range []string{"cluster/health.json", "cluster/members.json", "MANIFEST"} {
		if len(files[name]) == 0 {
			t.Errorf("the bundle has no %s", name)
		}
	}
	for _, n := range nodes {
		for _, f := range []string{"info.json", "metrics.txt", "log-boot0.txt", "log-boot-1.txt"} {
			if len(files["nodes/"+n.Name+"/"+f]) == 0 {
				t.Errorf("the bundle has no %s of %s; its MANIFEST:\n%s", f, n.Name, files["MANIFEST"])
			}
		}
		contains(t, n.Name+"'s metrics in the bundle", string(files["nodes/"+n.Name+"/metrics.txt"]), "etcd_server_has_leader")
	}
	for what, secret := range m.secrets(t) {
		for name, b := range files {
			if bytes.Contains(b, secret) {
				t.Errorf("the bundle's %s holds %s", name, what)
			}
		}
	}
}

// secrets are the keys the owner can read of the cluster, and the
// owner's, in each form a file could hold them: raw, base64 (whole, and
// each line of its PEM but the first, which is the same header for every
// P-256 key), and a private key's scalar in hex and base64.
func (m *multi) secrets(t *testing.T) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	addForms := func(what string, raw []byte) {
		out[what] = raw
		out[what+" (base64)"] = []byte(base64.StdEncoding.EncodeToString(raw))
		b := pem.EncodeToMemory(&pem.Block{Type: "X", Bytes: raw})
		for i, line := range strings.Split(string(b), "\n") {
			if i > 1 && len(line) >= 32 && !strings.HasPrefix(line, "-----") {
				out[fmt.Sprintf("%s (PEM line %d)", what, i)] = []byte(line)
			}
		}
	}
	addKey := func(what string, key crypto.Signer) {
		der, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		addForms(what, der)
		if k, ok := key.(*ecdsa.PrivateKey); ok {
			d := k.D.FillBytes(make([]byte, 32))
			out[what+"'s scalar (hex)"] = []byte(fmt.Sprintf("%x", d))
			out[what+"'s scalar (base64)"] = []byte(base64.StdEncoding.EncodeToString(d))
		}
	}
	kvs, err := m.client(t, m.c.Nodes[0]).Get(context.Background(), keyspace.CAKey)
	if err != nil || len(kvs.Kvs) != 1 {
		t.Fatalf("reading the CA key: %v", err)
	}
	caKey, err := pki.ParseKeyPEM(kvs.Kvs[0].Value)
	if err != nil {
		t.Fatal(err)
	}
	addKey("the CA key", caKey)
	tickets, err := m.client(t, m.c.Nodes[0]).Get(context.Background(), ticket.KeyPrefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range tickets.Kvs {
		addForms("ticket record "+string(kv.Key), kv.Value)
	}
	addKey("the owner key", m.owner(t).PrivateKey.(crypto.Signer))
	return out
}

// readBundle reads a support bundle's files.
func readBundle(t *testing.T, path string) map[string][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := zstd.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	files := map[string][]byte{}
	tr := tar.NewReader(zr)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatalf("reading the bundle: %v", err)
		}
		if files[hdr.Name], err = io.ReadAll(tr); err != nil {
			t.Fatal(err)
		}
	}
}

// dashboard prints two looks of `borough dashboard` as plain lines while
// a client writes: every member shows its write rate, and its log.
func (m *multi) dashboard(t *testing.T) {
	nodes := m.c.Nodes[:3]
	args := []string{"--config", m.config, "dashboard", "--count", "2", "--interval", "3s"}
	var eps []string
	for _, n := range nodes {
		eps = append(eps, n.Endpoint())
		args = append(args, "--api", n.Name+"="+n.API())
	}
	w := startWriter(t, m.client(t, nodes...))
	out := cli(t, append(args, strings.Join(eps, ","))...)
	w.stop()
	looks := strings.Split(out, "borough dashboard, ")
	if len(looks) != 3 {
		t.Fatalf("borough dashboard --count 2 printed %d looks:\n%s", len(looks)-1, out)
	}
	for _, n := range nodes {
		row := regexp.MustCompile(`(?m)^` + n.Name + `\s.*Running\s+([0-9.]+)\s`).FindStringSubmatch(looks[2])
		if row == nil || row[1] == "0.0" {
			t.Errorf("the dashboard's second look shows no writes on %s:\n%s", n.Name, looks[2])
		}
		contains(t, "the dashboard's log of "+n.Name, looks[2], "\n"+n.Name+":\n  ")
	}
}
