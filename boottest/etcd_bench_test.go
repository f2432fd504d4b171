//go:build boot

package boottest

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/etcdserver"

	"github.com/borough-os/borough/bench/load"
	"github.com/borough-os/borough/internal/admin"
	"github.com/borough-os/borough/qemu"
	"github.com/borough-os/borough/qemu/guestprof"
	"github.com/borough-os/borough/qemu/multinode"
)

// Shapes of BenchmarkAgainstEtcd's run: turns at each load, each turn's
// length, and the machines' memory and disk, for both clusters alike.
//
// The disk is a small server's, not the test image's 1 GiB: Borough's
// space budget sets how often etcd snapshots from the data volume's size
// (internal/space), every 100 entries on the image's volume and every
// 2,500 or so on this one's, against plain etcd's 10,000 on any disk.
// Each snapshot costs every member a few syncs, each a flush of its disk
// (docs/decisions.md, "Snapshots on a small volume").
const (
	etcdTurns     = 5
	etcdTurn      = 10 * time.Second
	etcdMemoryMiB = 1024
	etcdDisk      = 32 << 30
)

// etcdLoads are the loads of BenchmarkAgainstEtcd: etcd benchmark's put
// of 256-byte values from 1, 16 and 64 clients, and its linearizable
// range from 16, with a connection per member (one for one client).
var etcdLoads = []load.Params{
	etcdLoad(load.Put, 1, 1),
	etcdLoad(load.Put, 16, 3),
	etcdLoad(load.Put, 64, 3),
	etcdLoad(load.Range, 16, 3),
}

// etcdLoad is a load of a turn's length: 8-byte keys drawn from 100000,
// 256-byte values.
func etcdLoad(kind load.Kind, clients, conns int) load.Params {
	return load.Params{Kind: kind, Clients: clients, Conns: conns, For: etcdTurn, KeySize: 8, ValueSize: 256, KeySpace: 100000}
}

// side is one of the clusters BenchmarkAgainstEtcd compares.
type side struct {
	name      string
	vms       []*qemu.VM
	endpoints []string
	dial      load.Dial
	env       map[string]string
	results   map[string][]load.Result
	// io are the members' disk I/O counts under each load, over all turns,
	// and cpu the host CPU time their VMs used.
	io  map[string]qemu.BlockStats
	cpu map[string]time.Duration
	// idle is the host CPU time the members used while resumed with no
	// load, over idleFor, and idleFor the time.
	idle, idleFor time.Duration
	// perf are etcdctl check perf's verdicts.
	perf []string
	// term is the raft term last seen, and elections where it grew.
	term      uint64
	elections []string
	// gdb are the VMs' gdbstub sockets and bins the Go binaries they
	// run, if the side is profiled.
	gdb  []string
	bins []guestprof.Binary
	// snapshots says how often the side's etcd snapshots.
	snapshots string
}

// BenchmarkAgainstEtcd measures a three-node Borough cluster against its
// floor, plain etcd of the same version in the same VMs (floor says what
// is alike), in one run. Both clusters are up throughout; the one not
// measured is paused (qemu.VM.Pause), so that each load has the cores to
// itself, and the two take turns at each load, going first in alternate
// turns, so that machine load that drifts over minutes touches both
// alike. Per load it reports Borough's throughput, p50 and p99 against
// the floor's, over all turns, and each turn's ratio. The
// loads are etcd benchmark's (package load says why they are not run by
// etcd's own tool); then etcdctl check perf at s and m on each. With
// BOROUGH_BENCH_BASELINE naming another Borough image (the one before a
// change), that image runs too, as a third side, "baseline", in the same
// turns: a change measured against what it changes, in one run. With
// BOROUGH_BENCH_PROFILE naming a directory, one more turn, not counted,
// samples every member of each side under each load and at idle
// (profileTurn).
func BenchmarkAgainstEtcd(b *testing.B) {
	config := b.TempDir()
	cli(b, "--config", config, "owner", "init")
	profiles := os.Getenv(profileEnv)
	var params []string
	if profiles != "" {
		params = profileParams
	}
	img := nodeImage(b, params...)
	sides := []*side{boroughSide(b, "borough", img, config, profiles != "")}
	if base := os.Getenv(baselineEnv); base != "" {
		sides = append(sides, boroughSide(b, "baseline", base, config, false))
	}
	b.Log("booting plain etcd, three members, in the same VMs")
	fl := startFloor(b, 3, etcdMemoryMiB, grownDataSize(b, img, etcdDisk), params...)
	floor := &side{name: "floor", vms: fl.VMs, endpoints: fl.Endpoints, dial: fl.Dial, env: fl.Env,
		snapshots: fmt.Sprintf("every %d entries (etcd's default)", etcdserver.DefaultSnapshotCount)}
	if profiles != "" {
		floor.gdb, floor.bins = fl.GDB, []guestprof.Binary{{Name: "etcd", Symbols: goSymbols(b, fl.Etcd)}}
	}
	floor.watchTerm(b, "at the start")
	floor.pause(b)
	sides = append(sides, floor)
	for _, s := range sides {
		s.settle(b)
	}
	for turn := range etcdTurns {
		for _, p := range etcdLoads {
			for k := range sides {
				sides[(k+turn)%len(sides)].measure(b, p)
			}
		}
		for _, s := range sides {
			s.idleTurn(b)
		}
	}
	etcdctl := goBuild(b, "go.etcd.io/etcd/etcdctl/v3", "etcdctl")
	for _, level := range []string{"s", "m"} {
		for _, s := range sides {
			s.perf = append(s.perf, s.checkPerf(b, etcdctl, level))
		}
	}
	report(b, sides)
	if profiles != "" {
		profileTurn(b, sides, profiles)
	}
}

// baselineEnv names a Borough image to measure beside the one built, as
// "baseline": the image of the change before, so that a change is
// measured against what it changes in one run.
const baselineEnv = "BOROUGH_BENCH_BASELINE"

// boroughSide launches a three-node Borough cluster of img, waits until
// its members are voters, and returns it as a side, paused; with
// profiled, ready for profileTurn (img being the test build's). The
// cluster is killed when the benchmark ends.
func boroughSide(b *testing.B, name, img, config string, profiled bool) *side {
	b.Logf("launching a three-node Borough cluster (%s: %s)", name, img)
	c, err := multinode.Launch(context.Background(), multinode.Options{
		Nodes: 3, Image: img, DiskSize: etcdDisk, StateDir: b.TempDir(), Cluster: name, Owner: ownerPair(b, config),
		MemoryMiB: etcdMemoryMiB, Logf: b.Logf, GDB: profiled,
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Kill)
	if err := c.AwaitVoters(context.Background()); err != nil {
		b.Fatal(err)
	}
	owner := ownerPair(b, config)
	s := &side{name: name, dial: func(endpoint string) (*clientv3.Client, error) {
		return admin.Connect([]string{endpoint}, c.CA, owner)
	}}
	for _, n := range c.Nodes {
		s.vms, s.endpoints = append(s.vms, n.VM), append(s.endpoints, n.Endpoint())
		if profiled {
			s.gdb = append(s.gdb, n.GDB())
		}
	}
	if profiled {
		s.bins = []guestprof.Binary{{Name: "node", Symbols: goSymbols(b, filepath.Join(testOut(b), "node"))}}
	}
	// The owner's key itself, not an owner session (etcd env), whose
	// first use restarts each member's etcd while the turns run.
	s.snapshots = budgetSnapshots(b, c.Nodes[0].VM)
	s.env = map[string]string{"ETCDCTL_ENDPOINTS": "https://" + strings.Join(s.endpoints, ",https://"),
		"ETCDCTL_CACERT": c.CAFile, "ETCDCTL_CERT": filepath.Join(config, "owner.pem"), "ETCDCTL_KEY": ownerKeyFile(b, config)}
	s.watchTerm(b, "at the start")
	s.pause(b)
	return s
}

// budgetSnapshots says how often the member on vm snapshots, from its
// space budget's line on the console.
func budgetSnapshots(b *testing.B, vm *qemu.VM) string {
	m := regexp.MustCompile(`space budget volume=(\S+) .*snapshot_every=(\d+)`).FindStringSubmatch(vm.Console())
	if m == nil {
		b.Fatalf("a Borough member logged no space budget:\n%s", vm.Tail(20))
	}
	return fmt.Sprintf("every %s entries (the space budget of a %s volume)", m[2], m[1])
}

func (s *side) pause(b *testing.B) { pauseVMs(b, s.vms...) }

func (s *side) resumed(b *testing.B) *side {
	resumeVMs(b, s.vms...)
	return s
}

// measure runs p on s, resumed for it and paused after.
func (s *side) measure(b *testing.B, p load.Params) {
	s.resumed(b)
	defer s.pause(b)
	s.watchTerm(b, "paused, before "+p.Name())
	endpoints := s.endpoints
	if p.Conns == 1 {
		endpoints = s.leaderFirst(b)
	}
	before, cpu := s.blockStats(b), s.cpuTime(b)
	r, err := load.Run(context.Background(), s.dial, endpoints, p)
	if err != nil {
		b.Fatalf("%s: %v", s.name, err)
	}
	if s.results == nil {
		s.results, s.io, s.cpu = map[string][]load.Result{}, map[string]qemu.BlockStats{}, map[string]time.Duration{}
	}
	s.io[p.Name()] = s.io[p.Name()].Add(s.blockStats(b).Sub(before))
	s.cpu[p.Name()] += s.cpuTime(b) - cpu
	s.watchTerm(b, "during "+p.Name())
	s.results[p.Name()] = append(s.results[p.Name()], r)
	b.Logf("%s %s: %.0f/s, p50 %v, p99 %v", s.name, p.Name(), r.Throughput(),
		r.Percentile(0.5).Round(100*time.Microsecond), r.Percentile(0.99).Round(100*time.Microsecond))
}

// idleTurn resumes s for half a turn with no load and adds the host CPU
// its members used to s.idle: the cost of what runs when nobody asks
// anything (timers, watchers, the runtime's wake-ups), which a loaded
// turn pays too, on cores the three VMs share.
func (s *side) idleTurn(b *testing.B) {
	s.resumed(b)
	defer s.pause(b)
	cpu, start := s.cpuTime(b), time.Now()
	time.Sleep(etcdTurn / 2)
	s.idle += s.cpuTime(b) - cpu
	s.idleFor += time.Since(start)
}

// cpuTime is the host CPU time all of s's VMs have used.
func (s *side) cpuTime(b *testing.B) time.Duration {
	var sum time.Duration
	for _, vm := range s.vms {
		t, err := vm.CPUTime()
		if err != nil {
			b.Fatalf("%s: %v", s.name, err)
		}
		sum += t
	}
	return sum
}

// Quiet disks, for settle: at most quietBytes written by all of a side's
// members over quietOver, within settleWithin.
const (
	quietBytes   = 2 << 20
	quietOver    = 10 * time.Second
	settleWithin = 15 * time.Minute
)

// settle resumes s until its members' disks are quiet, and pauses it
// again: a first boot leaves ext4 zeroing the volume's inode tables in
// the background (mke2fs's lazy_itable_init, internal/storage), through
// dm-crypt on Borough's members, a few hundred MiB on etcdDisk, which
// would be charged to the turns that ran meanwhile. The benchmark
// measures members as they run afterwards.
func (s *side) settle(b *testing.B) {
	s.resumed(b)
	defer s.pause(b)
	start := time.Now()
	for last := s.blockStats(b); ; {
		time.Sleep(quietOver)
		now := s.blockStats(b)
		if written := now.Sub(last).WriteBytes; written <= quietBytes {
			b.Logf("%s: disks quiet after %v (%d KiB written over the last %v)", s.name,
				time.Since(start).Round(time.Second), written>>10, quietOver)
			return
		}
		if time.Since(start) > settleWithin {
			b.Fatalf("%s: the members' disks still write %d KiB every %v after %v", s.name,
				now.Sub(last).WriteBytes>>10, quietOver, settleWithin)
		}
		last = now
	}
}

// blockStats are the I/O counts of all of s's disks together.
func (s *side) blockStats(b *testing.B) qemu.BlockStats {
	var sum qemu.BlockStats
	for _, vm := range s.vms {
		st, err := vm.BlockStats()
		if err != nil {
			b.Fatalf("%s: %v", s.name, err)
		}
		sum = sum.Add(st)
	}
	return sum
}

// watchTerm notes an election if the raft term grew since it was last
// seen: pausing must not cause one, and a load that does says the
// cluster could not keep its leader under it.
func (s *side) watchTerm(b *testing.B, when string) {
	t := s.raftTerm(b)
	if s.term != 0 && t != s.term {
		s.elections = append(s.elections, fmt.Sprintf("%s (term %d to %d)", when, s.term, t))
	}
	s.term = t
}

// leaderFirst is s's endpoints with the leader's first: a load on one
// connection goes through the leader on either side, as on Borough it
// otherwise would more often than on the floor (its first member
// bootstraps the cluster and usually leads it), and a follower forwards
// each request to the leader, a hop the leader does not take.
func (s *side) leaderFirst(b *testing.B) []string {
	for i, ep := range s.endpoints {
		if st := s.status(b, ep); st.Header.MemberId == st.Leader {
			return append([]string{ep}, slices.Delete(slices.Clone(s.endpoints), i, i+1)...)
		}
	}
	b.Fatalf("%s: no member says it leads", s.name)
	return nil
}

// raftTerm is the raft term the first member says.
func (s *side) raftTerm(b *testing.B) uint64 { return s.status(b, s.endpoints[0]).RaftTerm }

// status is what the member at endpoint says of itself.
func (s *side) status(b *testing.B, endpoint string) *clientv3.StatusResponse {
	cl, err := s.dial(endpoint)
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := cl.Status(ctx, endpoint)
	if err != nil {
		b.Fatalf("%s: %v", s.name, err)
	}
	return st
}

// perfLine is a verdict of etcdctl check perf.
var perfLine = regexp.MustCompile(`(?m)(PASS|FAIL)(: .*)?$`)

// checkPerf runs etcdctl check perf at level on s, resumed for it, and
// returns its verdicts on one line. etcdctl is of the version Borough
// embeds (go.mod's tool).
func (s *side) checkPerf(b *testing.B, etcdctl, level string) string {
	s.resumed(b)
	defer s.pause(b)
	s.watchTerm(b, "paused, before check perf "+level)
	defer s.watchTerm(b, "during check perf "+level)
	cmd := exec.Command(etcdctl, "check", "perf", "--load="+level)
	env := cmd.Environ()
	for k, v := range s.env {
		env = append(env, k+"="+v)
	}
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	verdicts := perfLine.FindAllString(string(out), -1)
	if len(verdicts) == 0 {
		b.Fatalf("%s: etcdctl check perf --load=%s gave no verdict: %v\n%s", s.name, level, err, out)
	}
	return level + ": " + strings.Join(verdicts, "; ")
}

// report logs and reports each load's figures, each Borough side's over
// the floor's (the last side).
func report(b *testing.B, sides []*side) {
	floor := sides[len(sides)-1]
	b.Logf("%-10s %-9s %28s %28s %22s %15s", "load", "side", "req/s p50 p99", "floor req/s p50 p99", "ratio req/s p50 p99", "flushes/req")
	for _, p := range etcdLoads {
		name := p.Name()
		fl := pooled(floor.results[name])
		for _, s := range sides[:len(sides)-1] {
			bo := pooled(s.results[name])
			ratio := [3]float64{bo.Throughput() / fl.Throughput(), ms(bo.Percentile(0.5)) / ms(fl.Percentile(0.5)),
				ms(bo.Percentile(0.99)) / ms(fl.Percentile(0.99))}
			flushes := [2]float64{flushesPer(s.io[name], len(bo.Latencies)), flushesPer(floor.io[name], len(fl.Latencies))}
			b.Logf("%-10s %-9s %9.0f %8.1f %8.1f ms %9.0f %8.1f %8.1f ms %6.2f %6.2f %6.2f %7.2f %7.2f", name, s.name,
				bo.Throughput(), ms(bo.Percentile(0.5)), ms(bo.Percentile(0.99)),
				fl.Throughput(), ms(fl.Percentile(0.5)), ms(fl.Percentile(0.99)), ratio[0], ratio[1], ratio[2], flushes[0], flushes[1])
			b.Logf("%-10s %-9s each turn's ratio of req/s: %s; of p99: %s", name, s.name,
				turnRatios(s.results[name], floor.results[name], load.Result.Throughput),
				turnRatios(s.results[name], floor.results[name], p99ms))
			b.Logf("%-10s %-9s disk I/O per request, all members: %s; the floor's: %s", name, s.name,
				perRequest(s.io[name], len(bo.Latencies)), perRequest(floor.io[name], len(fl.Latencies)))
			b.Logf("%-10s %-9s host CPU per request, all members: %.2f ms; the floor's: %.2f ms", name, s.name,
				ms(s.cpu[name])/float64(max(len(bo.Latencies), 1)), ms(floor.cpu[name])/float64(max(len(fl.Latencies), 1)))
			b.ReportMetric(bo.Throughput(), "req/s-"+s.name+"-"+name)
			b.ReportMetric(ratio[0], "x-req/s-"+s.name+"-"+name)
			b.ReportMetric(ratio[2], "x-p99-"+s.name+"-"+name)
			b.ReportMetric(flushes[0], "flushes/req-"+s.name+"-"+name)
			if p.Kind == load.Put && p.Clients > 1 {
				tput := median(ratios(s.results[name], floor.results[name], load.Result.Throughput))
				p99 := median(ratios(s.results[name], floor.results[name], p99ms))
				b.Logf("%-10s %-9s target, medians of the turns' ratios: req/s >= 0.95 x the floor (%.2f): %s; p99 <= 1.1 x (%.2f): %s",
					name, s.name, tput, verdict(tput >= 0.95), p99, verdict(p99 <= 1.1))
			}
		}
		b.ReportMetric(flushesPer(floor.io[name], len(fl.Latencies)), "flushes/req-floor-"+name)
		b.ReportMetric(fl.Throughput(), "req/s-floor-"+name)
	}
	for _, s := range sides {
		b.Logf("%s: host CPU at idle, all members: %.1f%% of a core", s.name, 100*s.idle.Seconds()/s.idleFor.Seconds())
		b.Logf("%s: etcdctl check perf %s", s.name, strings.Join(s.perf, " | "))
		b.Logf("%s: elections: %s", s.name, cmp.Or(strings.Join(s.elections, "; "), "none"))
		b.Logf("%s: etcd snapshots %s", s.name, s.snapshots)
	}
	passes := func(s *side) bool { return !strings.Contains(s.perf[0], "FAIL") }
	for _, s := range sides[:len(sides)-1] {
		b.Logf("%s: target: check perf s passes where it passes on the floor (%t, the floor %t): %s",
			s.name, passes(s), passes(floor), verdict(passes(s) || !passes(floor)))
	}
	b.Log("targets: req/s of put at 16 and 64 clients >= 0.95 x the floor, p99 <= 1.1 x; check perf s passes on Borough where it passes on the floor")
}

// flushesPer is io's flushes per request, of n: each is an fsync or an
// ext4 journal commit reaching the virtual disk as a cache flush, the
// guest's I/O the host sees.
func flushesPer(io qemu.BlockStats, n int) float64 {
	return float64(io.FlushOps) / float64(max(n, 1))
}

// perRequest is io per request, of n.
func perRequest(io qemu.BlockStats, n int) string {
	r := float64(max(n, 1))
	return fmt.Sprintf("%.2f writes (%.1f KiB), %.2f flushes, %.2f reads", float64(io.WriteOps)/r,
		float64(io.WriteBytes)/1024/r, float64(io.FlushOps)/r, float64(io.ReadOps)/r)
}

// pooled is every turn's requests as one result.
func pooled(rs []load.Result) load.Result {
	var all load.Result
	for _, r := range rs {
		all.Latencies = append(all.Latencies, r.Latencies...)
		all.Took += r.Took
	}
	return all
}

// turnRatios is f of Borough over f of the floor, turn by turn.
func turnRatios(bo, fl []load.Result, f func(load.Result) float64) string {
	var out []string
	for _, r := range ratios(bo, fl, f) {
		out = append(out, fmt.Sprintf("%.2f", r))
	}
	return strings.Join(out, " ")
}

// ratios is f of Borough over f of the floor, turn by turn.
func ratios(bo, fl []load.Result, f func(load.Result) float64) []float64 {
	var out []float64
	for i := range min(len(bo), len(fl)) {
		out = append(out, f(bo[i])/f(fl[i]))
	}
	return out
}

// p99ms is r's 99th percentile, in milliseconds.
func p99ms(r load.Result) float64 { return ms(r.Percentile(0.99)) }

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
