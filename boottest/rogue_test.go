//go:build boot

package boottest

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/borough-os/borough/esp"
	"github.com/borough-os/borough/internal/escrow"
	"github.com/borough-os/borough/internal/keyspace"
	"github.com/borough-os/borough/qemu/multinode"
)

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
	answer, err := rogue.VM.Control("rogue escrowkey "+victim.Name, time.Minute)
	if err != nil || !strings.HasPrefix(answer, "ok: rogue escrowkey: holding") {
		t.Fatalf("rogue escrowkey: %q, %v", answer, err)
	}
	t.Log(answer)
	// The rogue holds its record until the peer has refused it: a peer's
	// round of keeping the unlock key can take a minute.
	sawLine(t, peer.VM, "node "+victim.Name+" was admitted with another key", 2*time.Minute)
	if answer, err = rogue.VM.Control("rogue release", time.Minute); err != nil || !strings.HasPrefix(answer, "ok: rogue release: published") {
		t.Fatalf("rogue release: %q, %v", answer, err)
	}
	t.Log(answer)
	if err := waitUntil(time.Minute, func() error {
		if now := escrowKeyOf(t, ctx, cl, victim.Name); !bytes.Equal(now.Key, own.Key) || !bytes.Equal(now.Cert, own.Cert) {
			return errors.New("another escrow key is published")
		}
		return nil
	}); err != nil {
		t.Fatalf("%s did not put its escrow key back: %v", victim.Name, err)
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
	if err := waitUntil(time.Minute, func() error {
		out, err := exec.Command(filepath.Join(outDir(t), "bin", "borough"), "--config", m.config, "node", "info", rogue.API(),
			"--fingerprint", m.c.Fingerprint).CombinedOutput()
		if err == nil && !strings.Contains(string(out), rogue.Name) {
			err = errors.New("it does not name the node")
		}
		if err != nil {
			return fmt.Errorf("%w\n%s", err, out)
		}
		return nil
	}); err != nil {
		t.Fatalf("node info of %s after its rogue node API stopped: %v", rogue.Name, err)
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
