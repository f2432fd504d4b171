//go:build boot

package boottest

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/borough-os/borough/internal/admin"
	"github.com/borough-os/borough/qemu"
	"github.com/borough-os/borough/qemu/multinode"
)

// restartTurns is how many times BenchmarkColdRestart reboots one member
// and then all three, on each side.
const restartTurns = 5

// BenchmarkColdRestart measures a three-node Borough cluster (TPM nodes
// whose unlock keys the cluster keeps) against its floor, plain etcd in
// the same VMs (startFloor), turn by turn: a member cut off and powered on
// again among its running peers, from its power-on to the first write
// acknowledged through its own client port (a reboot); and all three cut
// off and powered on together, from their power-on to the first write the
// cluster acknowledges through any of them (a cold restart). Both sides
// stop at the same event, a write acknowledged. The two clusters take
// turns, going first in alternate turns, the one not measured paused, so
// that machine load drifting over minutes touches both alike. Three VMs
// booting at once share this machine's two cores, and their firmware and
// kernels take longer for it: the floor's own gap, cold restart over
// reboot, is what the cores and etcd's first election among three fresh
// members add with no Borough. Target: Borough's gap within the floor's
// + 0.5 s, medians of the turns. For Borough it also reports the time
// within each boot from `init started` to `node running`, its own part,
// and draws the last turn's boots side by side: when each node reached
// each step, in seconds from QEMU's start.
func BenchmarkColdRestart(b *testing.B) {
	img := nodeImage(b)
	bo := boroughRestarter(b, img)
	b.Log("booting plain etcd, three members, in the same VMs")
	fl := floorRestarter(b, startFloor(b, 3, etcdMemoryMiB, dataPartitionSize(b, img)))
	fl.pause(b)
	sides := []*restarter{bo, fl}
	for turn := range restartTurns {
		for k := range sides {
			sides[(k+turn)%len(sides)].turn(b, turn)
		}
	}
	for _, s := range sides {
		b.ReportMetric(median(s.reboot), "s-"+s.name+"-reboot-to-write")
		b.ReportMetric(median(s.write), "s-"+s.name+"-cold-restart-to-write")
		b.ReportMetric(median(minus(s.write, s.reboot)), "s-"+s.name+"-cold-over-reboot")
		b.Logf("%s, median of %d turns: a member rebooted among running peers, power-on to the first write through it %.1f s; "+
			"all three powered on together, to the first write %.1f s; the gap by turn %s, median %+.1f s",
			s.name, restartTurns, median(s.reboot), median(s.write), turnGaps(s), median(minus(s.write, s.reboot)))
	}
	gap, floorGap := median(minus(bo.write, bo.reboot)), median(minus(fl.write, fl.reboot))
	b.Logf("target: Borough's gap <= the floor's + 0.5 s: %+.1f s against %+.1f s + 0.5: %s", gap, floorGap, verdict(gap <= floorGap+0.5))
	b.ReportMetric(median(bo.running), "s-borough-cold-restart-to-last-running")
	b.ReportMetric(median(bo.rebootOwn), "s-borough-reboot-init-to-running")
	b.ReportMetric(median(bo.coldOwn), "s-borough-cold-init-to-last-running")
	b.Logf("borough: all three to the last node running %.1f s; within the boots, init started to node running, median: "+
		"the reboot %.2f s, the cold restart's last node %.2f s (%+.2f s)",
		median(bo.running), median(bo.rebootOwn), median(bo.coldOwn), median(bo.coldOwn)-median(bo.rebootOwn))
	b.Logf("the last turn's boots, seconds from QEMU start (reboot: the node rebooted among running peers; node1-3: the cold restart):\n%s", bo.picture)
}

// restarter is one cluster BenchmarkColdRestart restarts, and its
// figures, a value per turn, in seconds.
type restarter struct {
	name string
	// reboot is a member's reboot to the first write through it, write
	// the cold restart's first write.
	reboot, write []float64
	// Borough's alone: the cold restart's last node running; init
	// started to node running in the reboot and in the cold restart's
	// last node; the last turn's boots side by side.
	running, rebootOwn, coldOwn []float64
	picture                     string

	// kill powers member i off; start boots it again, without waiting.
	kill, start func(b *testing.B, i int)
	// dial connects through member i; dialAll through every member.
	dial    func(i int) (*clientv3.Client, error)
	dialAll func() (*clientv3.Client, error)
	// settle waits until the cluster is whole again after a restart;
	// rebooted and restarted take Borough's own figures.
	settle              func(b *testing.B)
	rebooted, restarted func(b *testing.B, turn, i int)
	pause, resume       func(b *testing.B)
}

// turn runs one turn on s, resumed for it and paused after: member
// turn%3's reboot, then the cold restart.
func (s *restarter) turn(b *testing.B, turn int) {
	s.resume(b)
	defer s.pause(b)
	s.settle(b)
	i := turn % 3
	s.kill(b, i)
	start := time.Now()
	s.start(b, i)
	if err := firstWrite(func() (*clientv3.Client, error) { return s.dial(i) }, start); err != nil {
		b.Fatalf("%s: no write accepted through member %d after its reboot: %v", s.name, i+1, err)
	}
	s.reboot = append(s.reboot, time.Since(start).Seconds())
	s.rebooted(b, turn, i)
	s.settle(b)
	for m := range 3 {
		s.kill(b, m)
	}
	start = time.Now()
	for m := range 3 {
		s.start(b, m)
	}
	if err := firstWrite(s.dialAll, start); err != nil {
		b.Fatalf("%s: no write accepted after a cold restart: %v", s.name, err)
	}
	s.write = append(s.write, time.Since(start).Seconds())
	s.restarted(b, turn, i)
	b.Logf("%s, turn %d: member %d's reboot to the first write through it %.1f s; cold restart to the first write %.1f s (%+.1f s)",
		s.name, turn+1, i+1, s.reboot[turn], s.write[turn], s.write[turn]-s.reboot[turn])
}

// turnGaps is each turn's cold restart over its reboot.
func turnGaps(s *restarter) string {
	var out []string
	for _, d := range minus(s.write, s.reboot) {
		out = append(out, fmt.Sprintf("%+.1f", d))
	}
	return strings.Join(out, " ")
}

// boroughRestarter launches a three-node TPM cluster of img, paused, for
// BenchmarkColdRestart's turns.
func boroughRestarter(b *testing.B, img string) *restarter {
	config := b.TempDir()
	cli(b, "--config", config, "owner", "init")
	c, err := multinode.Launch(context.Background(), multinode.Options{
		Nodes: 3, Image: img, StateDir: b.TempDir(), Cluster: "cold", Owner: ownerPair(b, config),
		TPM: true, MemoryMiB: etcdMemoryMiB, Logf: b.Logf,
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Kill)
	if err := c.AwaitVoters(context.Background()); err != nil {
		b.Fatal(err)
	}
	owner := ownerPair(b, config)
	dial := func(i int) (*clientv3.Client, error) {
		return admin.Connect([]string{c.Nodes[i].Endpoint()}, c.CA, owner)
	}
	s := &restarter{
		name: "borough",
		kill: func(b *testing.B, i int) { c.Nodes[i].VM.Kill() },
		start: func(b *testing.B, i int) {
			if err := c.Restart(context.Background(), c.Nodes[i]); err != nil {
				b.Fatal(err)
			}
		},
		dial:    dial,
		dialAll: c.Client,
		settle: func(b *testing.B) {
			for i, n := range c.Nodes {
				awaitEscrow(b, n)
				if err := firstWrite(func() (*clientv3.Client, error) { return dial(i) }, time.Now()); err != nil {
					b.Fatalf("node%d accepts no write: %v\n%s", n.Index+1, err, n.VM.Tail(30))
				}
			}
		},
		pause:  func(b *testing.B) { pauseVMs(b, nodeVMs(c)...) },
		resume: func(b *testing.B) { resumeVMs(b, nodeVMs(c)...) },
	}
	var reboot column
	s.rebooted = func(b *testing.B, turn, i int) {
		n := c.Nodes[i]
		if err := c.WaitRunning(n); err != nil {
			b.Fatal(err)
		}
		awaitTimeline(b, n)
		reboot = column{"reboot", stepTimes(b, n)}
		s.rebootOwn = append(s.rebootOwn, inBoot(reboot.at))
	}
	s.restarted = func(b *testing.B, turn, i int) {
		columns, own, running := []column{reboot}, 0.0, time.Duration(0)
		for _, n := range c.Nodes {
			if err := c.WaitRunning(n); err != nil {
				b.Fatal(err)
			}
			awaitTimeline(b, n)
			at := stepTimes(b, n)
			columns = append(columns, column{fmt.Sprintf("node%d", n.Index+1), at})
			own, running = max(own, inBoot(at)), max(running, n.RunningAt)
		}
		s.coldOwn, s.running = append(s.coldOwn, own), append(s.running, running.Seconds())
		s.picture = bootPicture(columns)
	}
	s.pause(b)
	return s
}

// floorRestarter is the floor f for BenchmarkColdRestart's turns.
func floorRestarter(b *testing.B, f *floor) *restarter {
	return &restarter{
		name:      "floor",
		kill:      func(b *testing.B, i int) { f.VMs[i].Kill() },
		start:     func(b *testing.B, i int) { f.Restart(b, i) },
		dial:      func(i int) (*clientv3.Client, error) { return f.Dial(f.Endpoints[i]) },
		dialAll:   f.Client,
		settle:    func(b *testing.B) { f.awaitWrites(b) },
		rebooted:  func(*testing.B, int, int) {},
		restarted: func(*testing.B, int, int) {},
		pause:     func(b *testing.B) { pauseVMs(b, f.VMs...) },
		resume:    func(b *testing.B) { resumeVMs(b, f.VMs...) },
	}
}

// nodeVMs are c's nodes' VMs as they are now.
func nodeVMs(c *multinode.Cluster) []*qemu.VM {
	var vms []*qemu.VM
	for _, n := range c.Nodes {
		vms = append(vms, n.VM)
	}
	return vms
}

func pauseVMs(b *testing.B, vms ...*qemu.VM) {
	for _, vm := range vms {
		if err := vm.Pause(); err != nil {
			b.Fatal(err)
		}
	}
}

func resumeVMs(b *testing.B, vms ...*qemu.VM) {
	for _, vm := range vms {
		if err := vm.Resume(); err != nil {
			b.Fatal(err)
		}
	}
}

// inBoot is the time from init started to node running in a boot's
// steps; 0 without them.
func inBoot(at map[string]float64) float64 {
	return at["node running"] - at["init started"]
}

// awaitTimeline waits for n's boot timeline, which follows node running,
// to its line's end: the console shows a line as its characters arrive,
// and one read before its end lacks its last phases.
func awaitTimeline(b *testing.B, n *multinode.Node) {
	if _, _, err := n.VM.WaitLine("borough: boot timeline", stepTimeout); err != nil {
		b.Fatal(err)
	}
}

// firstWrite puts a key through the cluster every 100 ms, each time
// through a new client (a client whose connections broke waits out gRPC's
// reconnection backoff, seconds that are not the cluster's), until one is
// accepted.
func firstWrite(dial func() (*clientv3.Client, error), start time.Time) error {
	var err error
	for time.Since(start) < multinode.RunTimeout {
		var cl *clientv3.Client
		if cl, err = dial(); err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err = cl.Put(ctx, "cold-restart", start.String())
		cancel()
		cl.Close()
		if err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}

// bootSteps are what bootPicture places: a console line's time, by what
// the line says, or a phase of the node's boot timeline.
var bootSteps = []struct{ name, line, phase string }{
	{"init started", "borough: init started", ""},
	{"network up", "", "network"},
	{"asks peers for its key", "borough: unlock: asking peers for the cluster unlock key", ""},
	{"has its key", "borough: unlock: cluster unlock key recovered", ""},
	{"data mounted", "", "storage"},
	{"etcd serves", "", "etcd-ready"},
	{"node running", "borough: node running", ""},
}

// consoleTime is a console line's kernel time stamp and text; timelineMark
// a phase's time in a boot timeline line.
var (
	consoleTime  = regexp.MustCompile(`(?m)^\[\s*(\d+\.\d+)\] (.*)$`)
	timelineMark = regexp.MustCompile(`([a-z-]+)=(\d+\.\d+)\(`)
)

// column is one boot's steps, in seconds from its QEMU start.
type column struct {
	name string
	at   map[string]float64
}

// bootPicture is a table of when each boot reached each step.
func bootPicture(columns []column) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-24s", "")
	for _, c := range columns {
		fmt.Fprintf(&b, "%9s", c.name)
	}
	b.WriteByte('\n')
	for _, s := range bootSteps {
		fmt.Fprintf(&b, "%-24s", s.name)
		for _, c := range columns {
			if t, ok := c.at[s.name]; ok {
				fmt.Fprintf(&b, "%9.2f", t)
			} else {
				fmt.Fprintf(&b, "%9s", "-")
			}
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// stepTimes are n's bootSteps in its last boot, in seconds from its QEMU
// start: the console's kernel times, moved by the node's QEMU start to
// `node running` (RunningAt). The whole timeline line must be on the
// console (awaitTimeline).
func stepTimes(b *testing.B, n *multinode.Node) map[string]float64 {
	kernel := map[string]float64{}
	phases := map[string]float64{}
	for _, m := range consoleTime.FindAllStringSubmatch(n.VM.Console(), -1) {
		ts, _ := strconv.ParseFloat(m[1], 64)
		for _, s := range bootSteps {
			if _, seen := kernel[s.name]; !seen && s.line != "" && strings.HasPrefix(m[2], s.line) {
				kernel[s.name] = ts
			}
		}
		if strings.HasPrefix(m[2], "borough: boot timeline") {
			for _, p := range timelineMark.FindAllStringSubmatch(m[2], -1) {
				phases[p[1]], _ = strconv.ParseFloat(p[2], 64)
			}
		}
	}
	for _, s := range bootSteps {
		if t, ok := phases[s.phase]; ok && s.phase != "" {
			kernel[s.name] = t
		}
	}
	at, ok := kernel["node running"]
	if !ok {
		b.Fatalf("node%d: no node running line on its console", n.Index+1)
	}
	out := map[string]float64{}
	for k, v := range kernel {
		out[k] = v - at + n.RunningAt.Seconds()
	}
	return out
}
