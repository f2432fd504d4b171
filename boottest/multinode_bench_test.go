//go:build boot

package boottest

import (
	"context"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/borough-os/borough/internal/admin"
	"github.com/borough-os/borough/internal/cmdline"
	"github.com/borough-os/borough/qemu/multinode"
)

// BenchmarkMultiNode measures, in one run: QEMU start to `node running`
// for the bootstrapping node; for the third node, which joins a voter and
// a learner and makes the cluster three voters, QEMU start to voter as
// the cluster's member list shows it (target: at most 5 s more than the
// bootstrapping node) and to its own `node running`, and, since
// every VM takes most of a core here, QEMU start to `node running` for a
// bootstrapping node booted while two others run, as the third node was:
// the difference to that is what joining itself costs; put latency through one node with one and with three voters;
// seconds from the leader's power cut until writes are accepted again
// (target: 3 s); and each node's idle resident memory. Restarts are
// BenchmarkColdRestart's.
func BenchmarkMultiNode(b *testing.B) {
	config := b.TempDir()
	cli(b, "--config", config, "owner", "init")
	ctx := context.Background()
	c, err := multinode.Launch(ctx, multinode.Options{
		Nodes: 1, Image: nodeImage(b), StateDir: b.TempDir(), Cluster: "bench",
		Owner:      ownerPair(b, config),
		TestParams: cmdline.TestMemory + "=5",
	})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Kill()
	// Restarts below overwrite the nodes' RunningAt: keep each figure
	// as it is measured.
	first := c.Nodes[0]
	bootstrap := first.RunningAt
	p1 := putLatency(b, c, first)
	second, err := c.AddNode()
	if err != nil {
		b.Fatal(err)
	}
	if err := c.Join(ctx, second, admin.TicketParams{}); err != nil {
		b.Fatal(err)
	}
	joiner, toVoter := joinThird(b, c)
	joinRunning := joiner.RunningAt
	b.Logf("the third node's console:\n%s", borough(joiner.VM.Console()))
	if err := c.AwaitVoters(ctx); err != nil {
		b.Fatal(err)
	}
	p3 := putLatency(b, c, first)
	rss := idleRSS(b, c)
	recovery := leaderCut(b, c)
	loaded := bootstrapAt(b, config)

	b.ReportMetric(bootstrap.Seconds(), "s-bootstrap-to-running")
	b.ReportMetric(toVoter.Seconds(), "s-join-to-voter")
	b.ReportMetric((toVoter - bootstrap).Seconds(), "s-join-over-bootstrap")
	b.ReportMetric(joinRunning.Seconds(), "s-join-to-running")
	b.ReportMetric(loaded.Seconds(), "s-bootstrap-to-running-beside-2-vms")
	b.ReportMetric((toVoter - loaded).Seconds(), "s-join-over-bootstrap-beside-2-vms")
	b.ReportMetric(p1[0], "ms-put-p50-1node")
	b.ReportMetric(p1[1], "ms-put-p99-1node")
	b.ReportMetric(p3[0], "ms-put-p50-3nodes")
	b.ReportMetric(p3[1], "ms-put-p99-3nodes")
	b.ReportMetric(recovery.Seconds(), "s-leader-cut-to-writes")
	b.ReportMetric(slices.Max(rss), "MiB-max-node-rss")
	b.Logf("QEMU start to node running: bootstrap %.1f s; QEMU start to voter, the third node: %.1f s (%.1f s more; target 5 s); "+
		"to its own node running %.1f s", bootstrap.Seconds(), toVoter.Seconds(), (toVoter - bootstrap).Seconds(),
		joinRunning.Seconds())
	b.Logf("a bootstrapping node booted beside two running VMs, as the third node was: %.1f s to node running; the third node became a voter %.1f s later than that",
		loaded.Seconds(), (toVoter - loaded).Seconds())
	b.Logf("put through node 1, p50/p99: 1 voter %.1f/%.1f ms, 3 voters %.1f/%.1f ms", p1[0], p1[1], p3[0], p3[1])
	b.Logf("leader power cut to writes accepted again: %.2f s (target 3 s); idle node RSS MiB: %v", recovery.Seconds(), rss)
}

// bootstrapAt boots a one-node cluster of its own, while the benchmark's
// cluster runs, and returns its QEMU start to `node running`.
func bootstrapAt(b *testing.B, config string) time.Duration {
	c, err := multinode.Launch(context.Background(), multinode.Options{
		Nodes: 1, Image: nodeImage(b), StateDir: b.TempDir(), Cluster: "loaded",
		Owner: ownerPair(b, config),
	})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Kill()
	return c.Nodes[0].RunningAt
}

// putLatency returns the p50 and p99 of puts through n, in ms.
func putLatency(b *testing.B, c *multinode.Cluster, n *multinode.Node) [2]float64 {
	cl, err := c.Client()
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	cl.SetEndpoints("https://" + n.Endpoint())
	return putTimes(b, cl)
}

// joinThird boots a third node with a ticket and returns it with the
// time from its QEMU start until the cluster has it as a voter (the
// leader's member list, polled through node 1 every 100 ms). It also
// waits for the node's own `node running`, which must name it a voter.
func joinThird(b *testing.B, c *multinode.Cluster) (*multinode.Node, time.Duration) {
	ctx := context.Background()
	cl, err := c.Client()
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	cl.SetEndpoints("https://" + c.Nodes[0].Endpoint())
	known := make(map[uint64]bool)
	list, err := cl.MemberList(ctx)
	if err != nil {
		b.Fatal(err)
	}
	for _, m := range list.Members {
		known[m.ID] = true
	}
	n, err := c.AddNode()
	if err != nil {
		b.Fatal(err)
	}
	if err := c.StartJoin(ctx, n, admin.TicketParams{}); err != nil {
		b.Fatal(err)
	}
	voter := awaitNewVoter(b, cl, n, known)
	if err := c.WaitRunning(n); err != nil {
		b.Fatal(err)
	}
	if !strings.Contains(n.RunningLine, " role=voter") {
		b.Fatalf("%s runs, but not as a voter: %q", n.Name, n.RunningLine)
	}
	return n, voter
}

// awaitNewVoter polls the member list until a member not known before is
// a voter, and returns n's time since QEMU start then.
func awaitNewVoter(b *testing.B, cl *clientv3.Client, n *multinode.Node, known map[uint64]bool) time.Duration {
	for deadline := time.Now().Add(multinode.RunTimeout); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		list, err := cl.MemberList(ctx)
		cancel()
		if err != nil {
			continue
		}
		for _, m := range list.Members {
			if !known[m.ID] && !m.IsLearner && m.Name != "" {
				return n.VM.Since()
			}
		}
	}
	b.Fatalf("no new voter within %v:\n%s", multinode.RunTimeout, n.VM.Tail(30))
	return 0
}

// idleRSS returns each node's last reported node-process RSS, in MiB.
func idleRSS(b *testing.B, c *multinode.Cluster) []float64 {
	re := regexp.MustCompile(`test: memory node_rss_kib=(\d+)`)
	var out []float64
	for _, n := range c.Nodes {
		if _, err := n.VM.WaitFor("borough: memory: test: memory", stepTimeout); err != nil {
			b.Fatal(err)
		}
		m := re.FindAllStringSubmatch(n.VM.Console(), -1)
		kib, _ := strconv.Atoi(m[len(m)-1][1])
		out = append(out, float64(kib)/1024)
	}
	return out
}

// leaderCut kills the leader under a steady stream of puts through the
// other nodes and returns the time from the kill to the first put
// accepted after it. The leader is left off.
func leaderCut(b *testing.B, c *multinode.Cluster) time.Duration {
	cl, err := c.Client()
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := cl.Status(ctx, c.Nodes[0].Endpoint())
	if err != nil {
		b.Fatal(err)
	}
	list, err := cl.MemberList(ctx)
	if err != nil {
		b.Fatal(err)
	}
	var leader *multinode.Node
	var others []string
	for _, n := range c.Nodes {
		isLeader := false
		for _, m := range list.Members {
			isLeader = isLeader || (m.ID == st.Leader && m.Name == n.Name)
		}
		if isLeader {
			leader = n
		} else {
			others = append(others, "https://"+n.Endpoint())
		}
	}
	if leader == nil {
		b.Fatal("no leader")
	}
	cl.SetEndpoints(others...)
	b.Logf("cutting the power of the leader %s; writing through %s", leader.Name, strings.Join(others, ","))
	leader.VM.Kill()
	cut := time.Now()
	for time.Since(cut) < 2*time.Minute {
		pctx, pcancel := context.WithTimeout(context.Background(), time.Second)
		_, err := cl.Put(pctx, "after-cut", "v", clientv3.WithPrevKV())
		pcancel()
		if err == nil {
			return time.Since(cut)
		}
	}
	b.Fatal("writes were not accepted within 2 minutes of the leader's power cut")
	return 0
}

// borough returns the console's lines of Borough's own, without etcd's.
func borough(console string) string {
	return consoleLines(console, func(l string) bool {
		return strings.Contains(l, "borough: ") && !strings.Contains(l, "consensus/etcd")
	})
}

// consoleLines are the lines of console that keep says to keep.
func consoleLines(console string, keep func(string) bool) string {
	var out []string
	for _, l := range strings.Split(console, "\n") {
		if keep(l) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
