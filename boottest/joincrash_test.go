//go:build boot

package boottest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/borough-os/borough/esp"
	"github.com/borough-os/borough/internal/admin"
	"github.com/borough-os/borough/internal/cluster"
	"github.com/borough-os/borough/qemu/multinode"
)

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
	var b []byte
	if err := waitUntil(time.Minute, func() error {
		if b = espCopy(t, n, f)[f]; bytes.Equal(b, old) {
			return errors.New("unchanged")
		}
		return nil
	}); err != nil {
		t.Fatalf("%s on node%d's ESP: %v", f, n.Index+1, err)
	}
	return b
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
	if err := waitUntil(time.Minute, func() error {
		if voters, _ := m.members(t); !slices.Contains(voters, name) {
			return fmt.Errorf("the voters are %v", voters)
		}
		return nil
	}); err != nil {
		t.Fatalf("%s did not become a voter: %v", name, err)
	}
}
