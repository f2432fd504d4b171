//go:build boot

package boottest

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	"github.com/borough-os/borough/esp"
	"github.com/borough-os/borough/proto/enrolmentpb"
	"github.com/borough-os/borough/qemu/multinode"
)

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
	w.await(t, 20, time.Minute)
	t.Logf("pulling the plug of the leader, node%d (%s), after %d writes", leader.Index+1, leader.Name, w.count())
	leader.VM.Kill()
	w.await(t, w.count()+20, 2*time.Minute)
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

func (m *multi) coldRestart(t *testing.T) {
	nodes := m.c.Nodes[:3]
	for _, n := range nodes {
		awaitEscrow(t, n)
	}
	w := startWriter(t, m.client(t, nodes[1:]...))
	w.await(t, 20, time.Minute)
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
	if m.oldOwner != "" {
		// The cluster was handed over: the locked node, whose ESP still
		// holds its enrolment config naming the old owner, takes the owner
		// its latest record is sealed to alone.
		contains(t, "the old owner on a locked node's API", cliFails(t, "--config", m.oldOwner, "node", "info", nodes[0].API(),
			"--fingerprint", m.c.Fingerprint), "tls")
	}
	powerWhileLocked(t, m, nodes[0])
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

// powerWhileLocked checks that n, waiting for its unlock key, obeys the
// power requests a machine gets: Ctrl-Alt-Del (SIGINT to process 1)
// reboots it, its power button powers it off; it then boots again into
// the same wait.
func powerWhileLocked(t *testing.T, m *multi, n *multinode.Node) {
	t.Helper()
	const waiting = "borough: unlock: warning: waiting for unlock: 0 of 1 shares"
	if err := n.VM.CtrlAltDel(); err != nil {
		t.Fatal(err)
	}
	expect(t, n.VM, stepTimeout, "Ctrl-Alt-Del: rebooting", "stopping bring-up")
	expect(t, n.VM, bootTimeout, waiting)
	if err := n.VM.PowerOff(powerTimeout); err != nil {
		t.Fatalf("the power button of a node waiting for its unlock key: %v", err)
	}
	expect(t, n.VM, time.Second, "power button pressed: powering off", "stopping bring-up")
	if err := m.c.Restart(context.Background(), n); err != nil {
		t.Fatal(err)
	}
	expect(t, n.VM, bootTimeout, waiting)
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

// awaitEscrow waits until the cluster keeps n's unlock key: n split it
// among its peers in this boot, or got it from them, or from its owner
// while its peers were down (the peers hold it still).
func awaitEscrow(t testing.TB, n *multinode.Node) {
	t.Helper()
	if err := waitUntil(3*time.Minute, func() error {
		c := n.VM.Console()
		if strings.Contains(c, "borough: unlock: the cluster keeps this node's unlock key") ||
			strings.Contains(c, "borough: unlock: cluster unlock key recovered") ||
			strings.Contains(c, "borough: unlock: the owner sent the cluster unlock key") {
			return nil
		}
		return errors.New("the console says no keeper has it")
	}); err != nil {
		t.Fatalf("node%d: the cluster does not keep its unlock key: %v\n%s", n.Index+1, err, n.VM.Tail(30))
	}
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

// await waits until the writer has n acknowledged writes.
func (w *writer) await(t testing.TB, n int, timeout time.Duration) {
	t.Helper()
	if err := waitUntil(timeout, func() error {
		if c := w.count(); c < n {
			return fmt.Errorf("%d acknowledged writes, want %d", c, n)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
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
