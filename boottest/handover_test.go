//go:build boot

package boottest

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/borough-os/borough/esp"
	"github.com/borough-os/borough/internal/admin"
	"github.com/borough-os/borough/internal/escrow"
	"github.com/borough-os/borough/internal/pki"
	"github.com/borough-os/borough/qemu/multinode"
)

// rogueOwner has rogue publish a hand-over of the cluster to a key of its
// own, as the owner's: every node passes it over, and the owner's tools
// still reach victim's node API (which trusts its owner at once).
func (m *multi) rogueOwner(t *testing.T, rogue, victim *multinode.Node) {
	t.Helper()
	answer, err := rogue.VM.Control("rogue owner", time.Minute)
	if err != nil || !strings.HasPrefix(answer, "ok: rogue owner: published") {
		t.Fatalf("rogue owner: %q, %v", answer, err)
	}
	t.Log(answer)
	for _, n := range m.c.Nodes[:3] {
		sawLine(t, n.VM, "refused an owner hand-over", time.Minute)
	}
	contains(t, "node info after a forged hand-over",
		cli(t, "--config", m.config, "node", "info", victim.API(), "--fingerprint", m.c.Fingerprint), victim.Name)
}

// ownerRotation hands the cluster over to a new owner key with `borough
// owner rotate`: every node takes the hand-over, its client port then
// takes the new owner and refuses the old, its node API answers the new
// owner with the node's admission by them, its disk's owner escrow is
// sealed to them and the old one is nowhere on the disk, and a backup made for the old owner does not open with
// the new key. The cases after it act as the new owner: the cold restart
// unlocks every node with shares its peers seal under the new owner's
// admissions, and new nodes join with the new owner's tickets.
func (m *multi) ownerRotation(t *testing.T) {
	nodes := m.c.Nodes[:3]
	old := m.owner(t)
	oldRecords := map[int][]byte{}
	for _, n := range nodes {
		oldRecords[n.Index] = espCopy(t, n, esp.OwnerRecovery)[esp.OwnerRecovery]
	}
	m.oldOwner = filepath.Join(m.t.TempDir(), "old-owner")
	if out, err := exec.Command("cp", "-a", m.config, m.oldOwner).CombinedOutput(); err != nil {
		t.Fatalf("keeping the old owner's config: %v\n%s", err, out)
	}
	out := cli(t, "--config", m.config, "owner", "rotate", nodes[0].Endpoint(), "--fingerprint", m.c.Fingerprint, "--name", "owner-2")
	t.Log(out)
	contains(t, "owner rotate", out, "handed the cluster over to owner \"owner-2\"", "takes the new owner on its client port")
	next := m.owner(t)
	fp := pki.Fingerprint(next.Leaf)
	for _, n := range nodes {
		sawLine(t, n.VM, "the cluster has a new owner", time.Minute)
		awaitOwnerReads(t, n, m.c, next)
		if ownerReads(n, m.c, old) == nil {
			t.Errorf("node%d still lets the old owner read after the hand-over", n.Index+1)
		}
		contains(t, "node info as the new owner",
			cli(t, "--config", m.config, "node", "info", n.API(), "--fingerprint", m.c.Fingerprint), n.Name)
	}
	for _, n := range nodes {
		if err := waitUntil(time.Minute, func() error {
			var r escrow.OwnerRecovery
			if err := json.Unmarshal(espCopy(t, n, esp.OwnerRecovery)[esp.OwnerRecovery], &r); err != nil {
				return err
			}
			if r.Owner != fp {
				return fmt.Errorf("it is sealed to %s", r.Owner)
			}
			return nil
		}); err != nil {
			t.Fatalf("node%d's owner escrow is not sealed to the new owner %s after the hand-over: %v", n.Index+1, fp, err)
		}
		if held, err := inImage(n.Disk(), oldRecords[n.Index]); err != nil || held {
			t.Errorf("node%d's disk still holds its owner escrow sealed to the old owner (in the ESP's freed clusters): %v, %v", n.Index+1, held, err)
		}
	}
	if m.backup != "" {
		contains(t, "a backup made for the old owner", cliFails(t, "--config", m.config, "cluster", "verify-backup", m.backup),
			"not encrypted to this owner's key")
	}
	m.c.HandedOver(next)
}

// backupUnderWrites backs the cluster up with `borough cluster backup`
// while the owner writes, checks it with `borough cluster verify-backup`,
// and has a copy with one byte changed refused.
func (m *multi) backupUnderWrites(t *testing.T) {
	nodes := m.c.Nodes[:3]
	w := startWriter(t, m.client(t, nodes...))
	path := filepath.Join(m.t.TempDir(), "multi.backup")
	out := cli(t, "--config", m.config, "cluster", "backup", nodes[1].Endpoint(), "--fingerprint", m.c.Fingerprint, "--out", path)
	acked := w.stop()
	t.Logf("%s(%d writes acknowledged meanwhile)", out, len(acked))
	contains(t, "cluster backup", out, "wrote "+path, "cluster multi at revision")
	contains(t, "verify-backup", cli(t, "--config", m.config, "cluster", "verify-backup", path), "a whole backup of cluster multi")
	damaged := damagedCopy(t, path)
	contains(t, "verify-backup of a changed copy", cliFails(t, "--config", m.config, "cluster", "verify-backup", damaged), "damaged or truncated")
	m.backup = path
}

// ownerReads reads through n's client port as owner.
func ownerReads(n *multinode.Node, c *multinode.Cluster, owner tls.Certificate) error {
	cl, err := admin.Connect([]string{n.Endpoint()}, c.CA, owner)
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = cl.Get(ctx, "k")
	return err
}

// awaitOwnerReads waits, two minutes at most, until owner reads through
// n's client port: each member restarts etcd in its turn after a
// hand-over.
func awaitOwnerReads(t *testing.T, n *multinode.Node, c *multinode.Cluster, owner tls.Certificate) {
	t.Helper()
	if err := waitUntil(2*time.Minute, func() error { return ownerReads(n, c, owner) }); err != nil {
		t.Fatalf("the new owner cannot read through node%d after the hand-over: %v", n.Index+1, err)
	}
}

// damagedCopy writes a copy of the file at path with its middle byte
// changed, beside it, and returns its path.
func damagedCopy(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 1
	damaged := path + ".damaged"
	if err := os.WriteFile(damaged, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return damaged
}
