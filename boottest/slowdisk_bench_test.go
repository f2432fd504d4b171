//go:build boot

package boottest

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/borough-os/borough/bench/load"
	"github.com/borough-os/borough/internal/admin"
	"github.com/borough-os/borough/qemu/multinode"
)

// slowTurns is how many turns BenchmarkSlowMember takes, each a healthy
// and a slow measure, the first in turn going first.
const slowTurns = 5

// BenchmarkSlowMember measures put-16 on a three-node cluster with every
// disk healthy and with one follower's disks slowed to slowDiskRate (the
// rate filter, qemu.VM.ThrottleDisks, taken to and lifted in turns, so
// that both sides run on the same cluster, alternating who goes first),
// its clients on the two other members. A slow follower should cost
// them little: the leader and the other follower make the quorum that
// commits a put, so its p99 is set by the healthy majority. Target: the
// slow side's p99 <= 1.25 x the healthy side's, throughput >= 0.8 x.
// Then, once, put-1 through the slow member itself: a follower answers a
// put only once it has applied it, so its own clients wait on its disk
// (at this rate, etcd's request timeout: a first run of this benchmark
// with clients on every member failed on it). A slow leader is another
// matter: it applies after its own disk writes, so its disk sets every
// put's latency; that is not what this measures.
func BenchmarkSlowMember(b *testing.B) {
	config := b.TempDir()
	cli(b, "--config", config, "owner", "init")
	c, err := multinode.Launch(context.Background(), multinode.Options{
		Nodes: 3, Image: nodeImage(b), StateDir: b.TempDir(), Cluster: "slow", Owner: ownerPair(b, config),
		MemoryMiB: etcdMemoryMiB, Logf: b.Logf, DiskFaults: true,
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Kill)
	if err := c.AwaitVoters(context.Background()); err != nil {
		b.Fatal(err)
	}
	leader, err := c.Leader(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	slow := c.Nodes[(leader.Index+1)%len(c.Nodes)]
	b.Logf("slow member: node%d, a follower (node%d leads)", slow.Index+1, leader.Index+1)
	owner := ownerPair(b, config)
	dial := func(endpoint string) (*clientv3.Client, error) { return admin.Connect([]string{endpoint}, c.CA, owner) }
	var others []string
	for _, n := range c.Nodes {
		if n != slow {
			others = append(others, n.Endpoint())
		}
	}
	p := etcdLoad(load.Put, 16, 2)
	results := map[bool][]load.Result{}
	for turn := range slowTurns {
		for _, slowed := range []bool{turn%2 == 1, turn%2 == 0} {
			rate := int64(0)
			if slowed {
				rate = slowDiskRate
			}
			if err := slow.VM.ThrottleDisks(rate); err != nil {
				b.Fatal(err)
			}
			time.Sleep(2 * time.Second) // nbdkit reads its rate file each second
			r, err := load.Run(context.Background(), dial, others, p)
			if err != nil {
				b.Fatal(err)
			}
			b.Logf("turn %d, slow follower %v: %.0f/s, p50 %v, p99 %v", turn+1, slowed, r.Throughput(),
				r.Percentile(0.5).Round(100*time.Microsecond), r.Percentile(0.99).Round(100*time.Microsecond))
			results[slowed] = append(results[slowed], r)
		}
	}
	throughSlow(b, slow, dial)
	if now, err := c.Leader(context.Background()); err != nil || now != leader {
		b.Logf("the leader changed during the run (now %v, %v): the figures mix a slow follower with a slow leader", now, err)
	}
	healthy, slowed := pooled(results[false]), pooled(results[true])
	tput, p99 := slowed.Throughput()/healthy.Throughput(), ms(slowed.Percentile(0.99))/ms(healthy.Percentile(0.99))
	b.Logf("%-22s %9s %8s %8s", "put-16", "req/s", "p50 ms", "p99 ms")
	for _, row := range []struct {
		name string
		r    load.Result
	}{{"every disk healthy", healthy}, {"one follower slow", slowed}} {
		b.Logf("%-22s %9.0f %8.1f %8.1f", row.name, row.r.Throughput(), ms(row.r.Percentile(0.5)), ms(row.r.Percentile(0.99)))
	}
	b.Logf("slow / healthy: req/s %.2f (target >= 0.8, %s), p99 %.2f (target <= 1.25, %s)", tput, verdict(tput >= 0.8), p99, verdict(p99 <= 1.25))
	b.ReportMetric(tput, "x-req/s-slow-follower")
	b.ReportMetric(p99, "x-p99-slow-follower")
}

// throughSlow runs put-1 through the slow member alone, its disks slowed,
// and logs what its client sees: latencies, or the error it got.
func throughSlow(b *testing.B, slow *multinode.Node, dial load.Dial) {
	if err := slow.VM.ThrottleDisks(slowDiskRate); err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := slow.VM.ThrottleDisks(0); err != nil {
			b.Fatal(err)
		}
	}()
	time.Sleep(2 * time.Second)
	r, err := load.Run(context.Background(), dial, []string{slow.Endpoint()}, etcdLoad(load.Put, 1, 1))
	if err != nil {
		b.Logf("put-1 through the slow follower itself: %v", err)
		return
	}
	b.Logf("put-1 through the slow follower itself: %.0f/s, p50 %v, p99 %v", r.Throughput(),
		r.Percentile(0.5).Round(100*time.Microsecond), r.Percentile(0.99).Round(100*time.Microsecond))
}

func verdict(met bool) string {
	if met {
		return "met"
	}
	return "NOT met"
}
