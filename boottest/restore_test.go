//go:build boot

package boottest

import (
	"context"
	"crypto/ecdsa"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/borough-os/borough/esp"
	"github.com/borough-os/borough/internal/crypt"
	"github.com/borough-os/borough/internal/escrow"
	"github.com/borough-os/borough/internal/keyspace"
	"github.com/borough-os/borough/qemu"
	"github.com/borough-os/borough/qemu/multinode"
)

// restoreFromBackup plays the worst day: the owner backs the cluster (the
// one recovered from its last node) up under writes, then every node
// loses power for good. A fresh node restores the backup (`enrolment
// bootstrap --restore`, `node restore`), with damaged copies refused
// first, before anything is written: it runs a cluster of a new ID with
// every key written before the backup and none after, the old nodes'
// records tombstones, their certificates revoked by the owner; and a new
// node joins it with a new ticket.
func (m *multi) restoreFromBackup(t *testing.T) {
	source := m.c.Nodes[0]
	cl := m.client(t, source)
	ctx := timeout(t, 10*time.Minute)
	if _, err := cl.Put(ctx, "restore/before", "kept"); err != nil {
		t.Fatal(err)
	}
	dir := m.t.TempDir()
	path := filepath.Join(dir, "multi.backup")
	w := startWriter(t, cl)
	cli(t, "--config", m.config, "cluster", "backup", source.Endpoint(), "--fingerprint", m.c.Fingerprint, "--out", path)
	w.stop()
	if _, err := cl.Put(ctx, "restore/after", "lost"); err != nil {
		t.Fatal(err)
	}
	list, err := cl.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	oldID := list.Header.ClusterId
	for _, n := range m.c.Nodes {
		if n.VM != nil {
			n.VM.Kill()
		}
	}
	damaged := damagedCopy(t, path)

	r, err := m.c.AddNode()
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "restore.pb")
	contains(t, "enrolment bootstrap --restore of a damaged backup",
		cliFails(t, append([]string{"--config", m.config, "enrolment", "bootstrap", "--restore", damaged, "--out", cfg}, links(r)...)...),
		"damaged or truncated")
	if _, err := os.Stat(cfg); err == nil {
		t.Errorf("enrolment bootstrap wrote %s from a damaged backup", cfg)
	}
	contains(t, "enrolment bootstrap --restore",
		cli(t, append([]string{"--config", m.config, "enrolment", "bootstrap", "--restore", path, "--out", cfg}, links(r)...)...),
		"the node restores cluster multi from "+path)
	if err := m.c.Start(ctx, r, cfg); err != nil {
		t.Fatal(err)
	}
	expect(t, r.VM, bootTimeout, "borough: waiting for the owner to send the backup to restore")
	key := nodeKey(t, r.VM, 0)
	contains(t, "node restore of a damaged backup",
		cliFails(t, "--config", m.config, "node", "restore", r.API(), damaged, "--enrolment", cfg, "--node-key", key), "damaged or truncated")
	// Another machine at the node's address, which read the config: the
	// owner's tool sends it nothing.
	notIt := "sha256:" + strings.Repeat("0", 64)
	contains(t, "node restore to a machine posing as the node",
		cliFails(t, "--config", m.config, "node", "restore", r.API(), path, "--enrolment", cfg, "--node-key", notIt),
		"presents key "+key+", not "+notIt)
	out := cli(t, "--config", m.config, "node", "restore", r.API(), path, "--enrolment", cfg, "--node-key", key, "--cluster", r.Endpoint())
	t.Log(out)
	contains(t, "node restore", out, "took the backup of cluster multi", "runs cluster multi",
		"revoked the certificates of "+source.Name)
	if err := m.c.WaitRunning(r); err != nil {
		t.Fatal(err)
	}
	rc := m.client(t, r)
	m.checkRestored(t, ctx, rc, oldID, list.Members)
	if out, err := m.etcdctl(t, []string{r.Endpoint()}, "get", "restore/before"); err != nil || !strings.Contains(out, "kept") {
		t.Errorf("the owner's etcdctl get restore/before on the restored cluster: %v\n%s", err, out)
	}

	j := m.joinNew(t, ctx, r)
	if got, err := rc.Get(ctx, "restore/before"); err != nil || len(got.Kvs) != 1 {
		t.Errorf("restore/before after a node joined the restored cluster: %v, %v", got, err)
	}
	m.restored, m.rejoined = r, j
}

// resetMember resets the node that joined the restored cluster with
// `borough node reset`, which refuses a member without the cluster to
// remove it from (and the cluster's last voter: quorumLost): it leaves
// the cluster, erases itself at a reboot and comes back to its first
// boot, where its old config (still in its fw_cfg) is refused, its
// ticket spent; the owner's escrowed keys of its old volume no longer
// open it; and it joins again with a new ticket the owner sends through
// its node API (`borough node enrol`).
func (m *multi) resetMember(t *testing.T) {
	r, j := m.restored, m.rejoined
	if r == nil || j == nil {
		t.Fatal("the restore case left no cluster to reset a member of")
	}
	// The node seals its keys for the owner's recovery after it runs,
	// in the background.
	sawLine(t, j.VM, "borough: unlock: sealed the node's unlock keys for the owner's recovery", stepTimeout)
	var old escrow.OwnerRecovery
	if err := json.Unmarshal(espCopy(t, j, esp.OwnerRecovery)[esp.OwnerRecovery], &old); err != nil {
		t.Fatal(err)
	}
	contains(t, "node reset of a member, without its cluster", cliFails(t, "--config", m.config, "node", "reset", j.API(),
		"--fingerprint", m.c.Fingerprint), "give --cluster")
	reset := len(j.VM.Console())
	out := cli(t, "--config", m.config, "node", "reset", j.API(), "--cluster", r.Endpoint(), "--fingerprint", m.c.Fingerprint)
	t.Log(out)
	contains(t, "node reset", out, "removed member "+j.Name, "left its cluster", "erases itself")
	// The first boot after the reset checks its config's ticket before it
	// touches the data partition, and the cluster refuses it.
	expect(t, j.VM, bootTimeout, "borough: reset: zeroed the data volume's header",
		"borough: reset: the node is erased; rebooting into its first boot", "borough: node failed:",
		ready)
	// The failed node leaves its data partition alone: it is read as it
	// runs.
	luk, cuk, err := old.Open(m.owner(t).PrivateKey.(*ecdsa.PrivateKey))
	if err != nil {
		t.Fatal(err)
	}
	switch state, h, err := crypt.Probe(dataSection(t, j.Disk())); {
	case err != nil:
		t.Fatal(err)
	case state == crypt.StateEmpty:
		// The header, and the salt of the volume key with it, is gone.
	case state != crypt.StateFormatted:
		t.Errorf("the reset node's data partition is %v", state)
	default:
		if _, err := h.VolumeKey(luk, cuk); err == nil {
			t.Error("the owner's escrowed keys of the node's old volume open the volume after its reset")
		}
	}
	cfg := m.joinConfig(t, r, j)
	contains(t, "node enrol of a node nobody verified", cliFails(t, "--config", m.config, "node", "enrol", j.API(), cfg, "--unverified"),
		"goes only to a node checked")
	contains(t, "node enrol", cli(t, "--config", m.config, "node", "enrol", j.API(), cfg, "--node-key", nodeKey(t, j.VM, reset)),
		"reboots into its first boot with "+cfg)
	if err := m.c.WaitRunning(j); err != nil {
		t.Fatal(err)
	}
}

// joinNew starts a fresh node that joins the cluster of via with a ticket
// the owner mints through via's client port, and waits until it runs.
func (m *multi) joinNew(t *testing.T, ctx context.Context, via *multinode.Node) *multinode.Node {
	t.Helper()
	n, err := m.c.AddNode()
	if err != nil {
		t.Fatal(err)
	}
	if err := m.c.Start(ctx, n, m.joinConfig(t, via, n)); err != nil {
		t.Fatal(err)
	}
	if err := m.c.WaitRunning(n); err != nil {
		t.Fatal(err)
	}
	return n
}

// joinConfig writes a config for n to join the cluster of via with a
// ticket the owner mints through via's client port, and returns its path.
func (m *multi) joinConfig(t *testing.T, via, n *multinode.Node) string {
	t.Helper()
	dir := m.t.TempDir()
	tk, cfg := filepath.Join(dir, "ticket.pb"), filepath.Join(dir, "join.pb")
	cli(t, "--config", m.config, "cluster", "ticket", via.Endpoint(), "--fingerprint", m.c.Fingerprint, "--out", tk)
	cli(t, append([]string{"--config", m.config, "enrolment", "join", "--ticket", tk, "--out", cfg}, links(n)...)...)
	return cfg
}

// checkRestored checks the cluster rc reaches is the backup's, restored:
// a new cluster ID, not oldID; the key written before the backup and not
// the one after; old, the backed-up members, tombstones.
func (m *multi) checkRestored(t *testing.T, ctx context.Context, rc *clientv3.Client, oldID uint64, old []*etcdserverpb.Member) {
	t.Helper()
	list, err := rc.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if list.Header.ClusterId == oldID || len(list.Members) != 1 {
		t.Errorf("the restored cluster is %x with %d members; the backed-up one was %x", list.Header.ClusterId, len(list.Members), oldID)
	}
	for key, want := range map[string]int{"restore/before": 1, "restore/after": 0} {
		if got, err := rc.Get(ctx, key); err != nil || len(got.Kvs) != want {
			t.Errorf("%s in the restored cluster: %v, %v; want %d", key, got, err, want)
		}
	}
	for _, o := range old {
		rec, err := keyspace.ReadNode(ctx, rc, o.Name)
		if err != nil || !rec.Removed {
			t.Errorf("%s's record in the restored cluster: %+v, %v; want a tombstone", o.Name, rec, err)
		}
	}
}

// links are the enrolment flags of n's two links, as the launcher sets
// them (multinode.Cluster.network).
func links(n *multinode.Node) []string {
	return []string{"--link", "mac=" + qemu.UserMAC + ",dhcp", "--link", "mac=" + n.MAC() + ",address=" + n.LAN.String() + "/24,advertise"}
}
