//go:build boot

package boottest

import (
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// quorumLost plays a cluster that loses two of its three voters for good.
// The survivor, powered off and on again, waits for shares its lost peers
// hold; its owner sends it its key over its node API (`borough node
// unlock`) and makes it the cluster's only member with its data
// (`borough cluster recover`), which removes and revokes the lost nodes.
// It holds every write acknowledged before the loss and takes new ones;
// it refuses to reset itself, its cluster's last voter; and two new nodes
// join it with tickets, holding its data. Before the loss, a recovery is
// refused: the cluster has its quorum. (How the unlock key goes back to
// the cluster as voters come is clusterkey.TestReconcile's.)
func (m *multi) quorumLost(t *testing.T) {
	nodes := m.c.Nodes[:3]
	survivor := nodes[0]
	for _, n := range nodes {
		awaitEscrow(t, n)
	}
	w := startWriter(t, m.client(t, nodes...))
	w.await(t, 20, time.Minute)
	acked := w.stop()
	contains(t, "cluster recover of a cluster with its quorum", cliFails(t, "--config", m.config, "cluster", "recover",
		survivor.API(), "--cluster", survivor.Endpoint(), "--fingerprint", m.c.Fingerprint), "the member has a leader")
	// A linearizable read through the survivor: it has applied every
	// acknowledged write before its peers go.
	ctx := timeout(t, 10*time.Minute)
	if _, err := m.client(t, survivor).Get(ctx, "load/"); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		n.VM.Kill()
	}
	if err := m.c.Restart(ctx, survivor); err != nil {
		t.Fatal(err)
	}
	expect(t, survivor.VM, bootTimeout, "borough: unlock: warning: waiting for unlock: 0 of")
	contains(t, "node unlock", cli(t, "--config", m.config, "node", "unlock", survivor.API(), "--fingerprint", m.c.Fingerprint),
		"its cluster unlock key: it opens its data volume")
	expect(t, survivor.VM, bootTimeout, "borough: state New -> Restarting")
	out := cli(t, "--config", m.config, "cluster", "recover", survivor.API(), "--cluster", survivor.Endpoint(),
		"--fingerprint", m.c.Fingerprint)
	t.Log(out)
	contains(t, "cluster recover", out, "serves alone; removing the 2 nodes lost", "runs on")
	if err := m.c.WaitRunning(survivor); err != nil {
		t.Fatal(err)
	}
	m.checkWrites(t, survivor, acked, "after the recovery")
	if _, err := m.client(t, survivor).Put(ctx, "recovered", "yes"); err != nil {
		t.Errorf("a write to the recovered cluster: %v", err)
	}
	contains(t, "node reset of the last voter", cliFails(t, "--config", m.config, "node", "reset", survivor.API(),
		"--cluster", survivor.Endpoint(), "--fingerprint", m.c.Fingerprint), "is the last voter of its cluster")
	for range 2 {
		// The first stays a learner until the second joins: it serves
		// serializable reads only.
		n := m.joinNew(t, ctx, survivor)
		if got, err := m.client(t, n).Get(ctx, "recovered", clientv3.WithSerializable()); err != nil || len(got.Kvs) != 1 {
			t.Errorf("the recovered cluster's key through a node that joined it: %v, %v", got, err)
		}
		// Whether the join met etcd's stall after a snapshot is a race
		// (consensus/stall.go): said, not checked.
		logs := cli(t, "--config", m.config, "logs", n.API(), "--fingerprint", m.c.Fingerprint)
		t.Logf("%s unstalled after the leader's snapshot: %v", n.Name, strings.Contains(logs, "moved its applied index"))
	}
}
