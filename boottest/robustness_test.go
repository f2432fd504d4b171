//go:build boot

package boottest

import (
	"context"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/borough-os/borough/internal/admin"
	"github.com/borough-os/borough/internal/crypt"
	"github.com/borough-os/borough/internal/poll"
	"github.com/borough-os/borough/qemu"
	"github.com/borough-os/borough/qemu/multinode"
	"github.com/borough-os/borough/robustness"
)

// recoveryBound is how soon after a fault heals every node must serve
// again (TCG); a node that takes longer counts as stuck.
const recoveryBound = 60 * time.Second

// robustnessRun is what `make robustness` sets: SEED, DURATION (of the
// faults) and NODES; make test runs the defaults: one tour of every kind,
// its seed the commit's.
type robustnessRun struct {
	seed uint64
	// from says where the seed came from, for the log.
	from string
	// duration is how long faults go on: the tour of every kind first,
	// however long it takes, then random draws until duration has passed
	// since the first fault.
	duration time.Duration
	nodes    int
	// faults are those the schedule draws from: every kind, or those
	// FAULTS names (comma-separated), to go after one.
	faults []fault
}

func robustnessConfig(t *testing.T) robustnessRun {
	r := robustnessRun{nodes: 3, faults: robustnessFaults}
	var err error
	if s := os.Getenv("SEED"); s != "" {
		if r.seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("SEED=%q is not a number", s)
		}
		r.from = "SEED"
	} else {
		r.seed, r.from = commitSeed(t)
	}
	if s := os.Getenv("DURATION"); s != "" {
		if r.duration, err = time.ParseDuration(s); err != nil {
			t.Fatalf("DURATION=%q is not a duration (e.g. 20m): %v", s, err)
		}
	}
	if s := os.Getenv("NODES"); s != "" {
		if r.nodes, err = strconv.Atoi(s); err != nil || (r.nodes != 3 && r.nodes != 5) {
			t.Fatalf("NODES=%q: 3 or 5", s)
		}
	}
	if s := os.Getenv("FAULTS"); s != "" {
		r.faults = nil
		for _, name := range strings.Split(s, ",") {
			i := slices.IndexFunc(robustnessFaults, func(f fault) bool { return f.name == name })
			if i < 0 {
				t.Fatalf("FAULTS names %q, which is no fault", name)
			}
			r.faults = append(r.faults, robustnessFaults[i])
		}
	}
	return r
}

// commitSeed is the seed of the commit checked out: its hash's first 16
// hex digits. Each commit's make test draws its own order of faults, and
// a failure names the seed that reruns it.
func commitSeed(t *testing.T) (uint64, string) {
	out, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatalf("robustness: no SEED given and no commit to take one from (git rev-parse HEAD: %v); set SEED=", err)
	}
	hash := strings.TrimSpace(string(out))
	seed, err := strconv.ParseUint(hash[:16], 16, 64)
	if err != nil {
		t.Fatalf("robustness: git rev-parse HEAD said %q, no commit hash", hash)
	}
	return seed, "commit " + hash[:12]
}

// schedule is the order of the faults: a tour of every kind in an order
// drawn from rand, then draws, as many as fit in duration.
type schedule struct {
	rand   *rand.Rand
	faults []fault
	tour   []int
	end    time.Time
}

func newSchedule(rng *rand.Rand, faults []fault, duration time.Duration) *schedule {
	return &schedule{rand: rng, faults: faults, tour: rng.Perm(len(faults)), end: time.Now().Add(duration)}
}

// next is the next fault, or false once the tour is over and the time
// is up.
func (s *schedule) next() (fault, bool) {
	if len(s.tour) > 0 {
		f := s.faults[s.tour[0]]
		s.tour = s.tour[1:]
		return f, true
	}
	if time.Now().After(s.end) {
		return fault{}, false
	}
	return s.faults[s.rand.IntN(len(s.faults))], true
}

// TestRobustness runs a cluster of TPM nodes whose disks lose what they
// did not flush (nbdkit) under a recorded workload of three clients, one
// through each of the first three nodes (or the node that replaced it),
// while a seeded schedule injects
// faults: power cuts of a node, of the leader, of a minority and of every
// node (a cold restart through the unlock escrow), the leader isolated,
// a minority split off, lossy links, the leader's frames to the others
// dropped one way, a fresh node's join cut by a power loss at a drawn
// moment (then the owner removes it), a member removed and a fresh node
// joined in its place, a rolling update of every member, one node's
// clock stepped forward or back, one node's disk failing (EIO) for a few
// seconds, one node's disk slow, one node's volume filled by someone
// else: first each kind once, in an order drawn from the seed, then
// draws. After each fault heals, every node
// must answer a linearizable read through its own client port within
// recoveryBound, or it counts as stuck. At the end every node loses
// power once more and comes back; then a read of every key through
// every node, and the
// checks: the history is linearizable (porcupine; its picture is saved
// otherwise), so no acknowledged write is lost; no node is stuck; no data
// partition was reformatted (same cluster ID, same volume headers). The
// same SEED draws the same schedule.
func TestRobustness(t *testing.T) {
	cfg := robustnessConfig(t)
	t.Logf("robustness: seed %d (from %s), a tour of %d kinds of fault then draws until %v, %d nodes (SEED=%d reruns this schedule)",
		cfg.seed, cfg.from, len(cfg.faults), cfg.duration, cfg.nodes, cfg.seed)
	config := owner(t)
	c := launch(t, config, multinode.Options{Nodes: cfg.nodes, Image: nodeImage(t), Cluster: "robust", TPM: true, VolatileCache: true,
		DiskFaults: true, Control: true})
	owner := ownerPair(t, config)
	r := &faultRun{t: t, c: c, config: config, nodes: slices.Clone(c.Nodes), owner: owner, rand: rand.New(rand.NewPCG(cfg.seed, 0)),
		faults: map[string]int{}, clients: map[string]*clientv3.Client{}}
	for _, n := range r.nodes {
		awaitEscrow(t, n)
	}
	before := r.identity()
	h := robustness.NewHistory()
	w := robustness.Workload{Prefix: "robust/", Seed: cfg.seed}
	watchCtx, stopWatch := context.WithCancel(context.Background())
	defer stopWatch()
	r.watch = r.connect(r.c.Endpoints()...)
	commits, err := robustness.WatchCommits(watchCtx, r.watch, w.Prefix)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range r.nodes[:3] {
		r.workload = append(r.workload, r.connect(n.Endpoint()))
	}
	w.Clients = r.workload
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		w.Run(ctx, h)
		close(done)
	}()
	sched := newSchedule(r.rand, cfg.faults, cfg.duration)
	for f, ok := sched.next(); ok; f, ok = sched.next() {
		time.Sleep(time.Duration(3+r.rand.IntN(5)) * time.Second)
		t.Logf("robustness: fault %d: %s", len(r.log)+1, f.name)
		r.faults[f.name]++
		r.log = append(r.log, f.name)
		f.inject(r)
	}
	stop()
	<-done
	t.Log("robustness: the last fault: a power cut of every node")
	r.cutAll()
	// Every node reads every key through its own client port: what a
	// write acknowledged must be there, whichever member answers.
	for _, n := range r.nodes {
		if err := w.Final(r.client(n), h); err != nil {
			t.Fatalf("node%d: %v", n.Index+1, err)
		}
	}
	if err := commits.Sync(r.client(r.nodes...), w.Prefix, 2*time.Minute); err != nil {
		t.Logf("robustness: the watch of the workload's keys: %v", err)
	}
	settled := h.Settle(commits)
	before = r.joined(before)
	after := r.identity()
	// The check has the machine's cores to itself.
	for _, n := range r.c.Nodes {
		if n.VM != nil {
			n.VM.Kill()
		}
	}
	html := filepath.Join(outDir(t), "failed", t.Name(), fmt.Sprintf("history-seed%d.html", cfg.seed))
	if err := os.MkdirAll(filepath.Dir(html), 0o755); err != nil {
		t.Fatal(err)
	}
	checkErr := h.Check(5*time.Minute, html)
	t.Log(r.table(h, settled, checkErr, before, after))
	if checkErr != nil {
		t.Error(checkErr)
	}
	if !slices.Equal(before, after) {
		t.Errorf("the cluster or a data volume changed identity: before %v, after %v", before, after)
	}
	if r.stuck > 0 {
		t.Errorf("%d times a node did not serve within %v of a fault healing", r.stuck, recoveryBound)
	}
}

// faultRun is one run's cluster, schedule and tallies.
type faultRun struct {
	t      *testing.T
	c      *multinode.Cluster
	config string
	// nodes are the cluster's members; nodes that joined and were
	// removed again by a fault are not among them, members removed and
	// replaced are not either, their replacements are.
	nodes []*multinode.Node
	// replaced are the nodes that took a removed member's place, with
	// the identity of their data volume once they ran.
	replaced map[*multinode.Node]string
	// workload are the workload's clients, one per node of the first
	// three places; a replacement takes over its predecessor's. watch
	// is the client of the watch of the workload's keys, through every
	// member.
	workload []*clientv3.Client
	watch    *clientv3.Client
	// version is the minor version of the last rolling update.
	version int
	owner   tls.Certificate
	rand    *rand.Rand
	faults  map[string]int
	log     []string
	longest time.Duration
	stuck   int
	// clients are the owner's, by their endpoints.
	clients map[string]*clientv3.Client
}

// fault is a kind of fault the schedule draws.
type fault struct {
	name   string
	inject func(*faultRun)
}

// robustnessFaults are what the schedule draws from.
var robustnessFaults = []fault{
	{"power cut of one node", func(r *faultRun) { r.cut(r.pick(1)...) }},
	{"power cut of the leader", func(r *faultRun) { r.cut(r.leader()) }},
	{"power cut of a minority", func(r *faultRun) { r.cut(r.pick(r.minority())...) }},
	{"power cut of every node", (*faultRun).cutAll},
	{"leader isolated", func(r *faultRun) { r.partition([]*multinode.Node{r.leader()}, 0) }},
	{"minority split off", func(r *faultRun) { r.partition(r.pick(r.minority()), 0) }},
	{"lossy links", func(r *faultRun) { r.partition(nil, 0.3) }},
	{"one-way cut from the leader", (*faultRun).oneWay},
	{"join cut by a power loss", (*faultRun).cutJoin},
	{"member replaced", (*faultRun).replace},
	{"rolling update", (*faultRun).update},
	{"clock jump of one node", (*faultRun).clockJump},
	{"disk errors on one node", (*faultRun).diskErrors},
	{"slow disk on one node", (*faultRun).slowDisk},
	{"volume filled on one node", (*faultRun).fillVolume},
}

func (r *faultRun) minority() int { return (len(r.nodes) - 1) / 2 }

// pick draws k distinct nodes.
func (r *faultRun) pick(k int) []*multinode.Node {
	nodes := slices.Clone(r.nodes)
	r.rand.Shuffle(len(nodes), func(i, j int) { nodes[i], nodes[j] = nodes[j], nodes[i] })
	return nodes[:k]
}

// client is the owner's client through nodes, made once.
func (r *faultRun) client(nodes ...*multinode.Node) *clientv3.Client {
	var eps []string
	for _, n := range nodes {
		eps = append(eps, n.Endpoint())
	}
	key := strings.Join(eps, ",")
	if cl, ok := r.clients[key]; ok {
		return cl
	}
	cl := r.connect(eps...)
	r.clients[key] = cl
	return cl
}

// endpoints are the members' client endpoints.
func (r *faultRun) endpoints() []string {
	var eps []string
	for _, n := range r.nodes {
		eps = append(eps, n.Endpoint())
	}
	return eps
}

// connect makes a client of the owner's through endpoints.
func (r *faultRun) connect(endpoints ...string) *clientv3.Client {
	cl, err := admin.Connect(endpoints, r.c.CA, r.owner)
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { cl.Close() })
	return cl
}

// leader is the node that leads, once one does (an election may be
// under way).
func (r *faultRun) leader() *multinode.Node {
	var l *multinode.Node
	if err := waitUntil(recoveryBound, func() (err error) {
		l, err = r.c.Leader(context.Background())
		return err
	}); err != nil {
		r.t.Fatal(err)
	}
	return l
}

// cut cuts the power of nodes (their disks lose what they did not
// flush), waits a moment, powers them on, and times until every node
// serves.
func (r *faultRun) cut(nodes ...*multinode.Node) {
	for _, n := range nodes {
		n.VM.Kill()
	}
	time.Sleep(time.Duration(1+r.rand.IntN(4)) * time.Second)
	healed := time.Now()
	for _, n := range nodes {
		if err := r.c.Restart(context.Background(), n); err != nil {
			r.t.Fatal(err)
		}
	}
	for _, n := range nodes {
		if err := r.c.WaitRunning(n); err != nil {
			r.t.Fatal(err)
		}
	}
	r.allServing(healed)
}

func (r *faultRun) cutAll() { r.cut(r.nodes...) }

// partition cuts the nodes given off from the others both ways, or, with
// none given, drops a share of the frames on every link; it heals after
// a few seconds and times until every node answers a linearizable read.
func (r *faultRun) partition(nodes []*multinode.Node, drop float64) {
	r.c.Hub.Seed(r.rand.Uint64())
	if nodes == nil {
		for _, a := range r.nodes {
			for _, b := range r.nodes {
				if a != b {
					if err := r.c.Hub.SetFault(a.MAC(), b.MAC(), qemu.Fault{Drop: drop}); err != nil {
						r.t.Fatal(err)
					}
				}
			}
		}
	} else {
		var in, out []string
		for _, n := range r.nodes {
			if slices.Contains(nodes, n) {
				in = append(in, n.MAC())
			} else {
				out = append(out, n.MAC())
			}
		}
		if err := r.c.Hub.Partition(in, out); err != nil {
			r.t.Fatal(err)
		}
	}
	r.heal()
}

// heal heals the network's faults after a few seconds and times until
// every node answers a linearizable read.
func (r *faultRun) heal() {
	time.Sleep(time.Duration(5+r.rand.IntN(6)) * time.Second)
	r.c.Hub.Heal()
	r.allServing(time.Now())
}

// allServing waits until every node answers a linearizable read through
// its own client port, each for up to recoveryBound after healed, and
// times the cluster's recovery.
func (r *faultRun) allServing(healed time.Time) {
	for _, n := range r.nodes {
		r.awaitServing(n, healed)
	}
	r.recovered(time.Since(healed))
}

// awaitServing waits until n answers a linearizable read, for up to
// recoveryBound after healed, then counts it stuck.
func (r *faultRun) awaitServing(n *multinode.Node, healed time.Time) {
	cl := r.client(n)
	err := poll.Until(context.Background(), recoveryBound-time.Since(healed), 500*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := cl.Get(ctx, "robust/serving")
		return err
	})
	if err == nil {
		return
	}
	r.t.Logf("robustness: node%d does not serve %v after the fault healed: %v", n.Index+1, recoveryBound, err)
	r.stuck++
}

func (r *faultRun) recovered(d time.Duration) {
	r.longest = max(r.longest, d)
	if d > recoveryBound {
		r.t.Logf("robustness: the cluster took %v to serve again (bound %v)", d, recoveryBound)
		r.stuck++
	}
}

// identity is the cluster's ID and each node's data volume's: a
// reformat changes one.
func (r *faultRun) identity() []string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	list, err := r.client(r.nodes...).MemberList(ctx)
	if err != nil {
		r.t.Fatal(err)
	}
	out := []string{fmt.Sprintf("cluster %x", list.Header.ClusterId)}
	for _, n := range r.nodes {
		out = append(out, fmt.Sprintf("node%d volume %s", n.Index+1, volumeID(r.t, n.Disk())))
	}
	return out
}

// volumeID identifies the data volume on img: the salt of its header
// (package crypt), as flushed to the image, which a reformat draws anew.
func volumeID(t *testing.T, img string) string {
	t.Helper()
	state, h, err := crypt.Probe(dataSection(t, img))
	if err != nil || state != crypt.StateFormatted {
		t.Fatalf("%s: the data partition holds no volume header (%v, %v)", img, state, err)
	}
	return hex.EncodeToString(h.Salt[:])
}

// table is the run's summary.
func (r *faultRun) table(h *robustness.History, settled robustness.Settled, checkErr error, before, after []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "robustness summary\n  faults injected:\n")
	names := make([]string, 0, len(r.faults))
	for k := range r.faults {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		fmt.Fprintf(&b, "    %-28s %d\n", k, r.faults[k])
	}
	fmt.Fprintf(&b, "    %-28s 1 (the last)\n", "final power cut of all")
	fmt.Fprintf(&b, "  operations: %s\n", h)
	fmt.Fprintf(&b, "  writes of unknown outcome, by the watch: %s\n", settled)
	anomalies := 0
	if checkErr != nil {
		anomalies = 1
	}
	fmt.Fprintf(&b, "  linearizable: %v (anomalies %d; an acknowledged write lost would be one)\n", checkErr == nil, anomalies)
	fmt.Fprintf(&b, "  nodes stuck: %d; longest recovery: %v\n", r.stuck, r.longest.Round(100*time.Millisecond))
	if slices.Equal(before, after) {
		fmt.Fprintf(&b, "  reformats: none (%s and every node's data volume unchanged)\n", before[0])
	} else {
		fmt.Fprintf(&b, "  reformats or a new cluster: before %v, after %v\n", before, after)
	}
	return b.String()
}

// oneWay drops every frame from the leader to the others, not back, for
// a few seconds: the leader hears its followers and they do not hear it.
func (r *faultRun) oneWay() {
	leader := r.leader()
	for _, n := range r.nodes {
		if n != leader {
			if err := r.c.Hub.SetFault(leader.MAC(), n.MAC(), qemu.Fault{Drop: 1}); err != nil {
				r.t.Fatal(err)
			}
		}
	}
	r.heal()
}

// cutJoin boots a fresh node with a ticket, cuts its power at a moment
// drawn from the first 25 s of its boot and join, powers it on again, and
// waits until it runs; then the owner removes it, and it must say so.
func (r *faultRun) cutJoin() {
	n, err := r.c.AddNode()
	if err != nil {
		r.t.Fatal(err)
	}
	if err := r.c.StartJoin(context.Background(), n, admin.TicketParams{}); err != nil {
		r.t.Fatal(err)
	}
	at := time.Duration(r.rand.IntN(25000)) * time.Millisecond
	time.Sleep(at)
	r.t.Logf("robustness: cutting node%d's power %v into its join", n.Index+1, at)
	n.VM.Kill()
	healed := time.Now()
	if err := r.c.Restart(context.Background(), n); err != nil {
		r.t.Fatal(err)
	}
	if err := r.c.WaitRunning(n); err != nil {
		r.t.Fatal(err)
	}
	r.allServing(healed)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := admin.RemoveNode(ctx, r.client(r.nodes...), n.Name, r.owner, nil); err != nil {
		r.t.Fatalf("removing node%d after its join: %v", n.Index+1, err)
	}
	if _, err := n.VM.WaitFor("borough: node failed: removed from cluster", recoveryBound); err != nil {
		r.t.Fatal(err)
	}
	n.VM.Kill()
}

// replace removes a drawn member under load, as the owner's `borough node
// remove` does, powers it off once it says it was removed, and joins a
// fresh node in its place with a new ticket; the workload's client of the
// old node goes through the new one. The fault has healed when the new
// node runs, votes and the cluster keeps its unlock key.
func (r *faultRun) replace() {
	old := r.pick(1)[0]
	i := slices.Index(r.nodes, old)
	others := slices.Delete(slices.Clone(r.nodes), i, i+1)
	ctx, cancel := context.WithTimeout(context.Background(), multinode.RunTimeout)
	defer cancel()
	start := time.Now()
	if _, err := admin.RemoveNode(ctx, r.client(others...), old.Name, r.owner, nil); err != nil {
		r.t.Fatalf("removing node%d: %v", old.Index+1, err)
	}
	if _, err := old.VM.WaitFor("borough: node failed: removed from cluster", recoveryBound); err != nil {
		r.t.Fatal(err)
	}
	old.VM.Kill()
	n, err := r.c.AddNode()
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Logf("robustness: node%d removed; node%d joins in its place", old.Index+1, n.Index+1)
	if err := r.c.Join(ctx, n, admin.TicketParams{}); err != nil {
		r.t.Fatal(err)
	}
	r.nodes[i] = n
	if err := r.c.AwaitVoters(ctx); err != nil {
		r.t.Fatal(err)
	}
	awaitEscrow(r.t, n)
	if i < len(r.workload) {
		r.workload[i].SetEndpoints(n.Endpoint())
	}
	r.watch.SetEndpoints(r.endpoints()...)
	if r.replaced == nil {
		r.replaced = map[*multinode.Node]string{}
	}
	r.replaced[n] = volumeID(r.t, n.Disk())
	r.allServing(time.Now())
	r.t.Logf("robustness: node%d replaced node%d in %v", n.Index+1, old.Index+1, time.Since(start).Round(100*time.Millisecond))
}

// joined is the identity the run expects at its end: before's, with each
// replaced member's line that of the node in its place.
func (r *faultRun) joined(before []string) []string {
	out := slices.Clone(before)
	for i, n := range r.nodes {
		if id, ok := r.replaced[n]; ok {
			out[i+1] = fmt.Sprintf("node%d volume %s", n.Index+1, id)
		}
	}
	return out
}

// update rolls the next version out to every member under load with
// `borough update --cluster` (followers first, the leader last, quorum
// kept, each member confirming itself); then every node must serve.
func (r *faultRun) update() {
	r.version++
	version := fmt.Sprintf("1.%d.0", r.version)
	img := signedImage(r.t, r.config, version)
	var eps []string
	for _, n := range r.nodes {
		eps = append(eps, n.Endpoint())
	}
	args := []string{"--config", r.config, "update", "--cluster", strings.Join(eps, ","), img, "--fingerprint", r.c.Fingerprint}
	for _, n := range r.nodes {
		args = append(args, "--api", n.Name+"="+n.API())
	}
	start := time.Now()
	out := cli(r.t, args...)
	want := fmt.Sprintf("all %d members run %s", len(r.nodes), version)
	if !strings.Contains(out, want) {
		r.t.Fatalf("borough update --cluster did not say %q:\n%s", want, out)
	}
	r.t.Logf("robustness: %s rolled out in %v", version, time.Since(start).Round(100*time.Millisecond))
	healed := time.Now()
	for _, n := range r.nodes {
		r.awaitServing(n, healed)
	}
	r.recovered(time.Since(healed))
}

// clockJump steps one node's wall clock by a drawn 1 to 30 minutes
// forward or back, as a time server's step would, through the VM's control
// port; every node must serve with it so, and again once the clock is
// stepped back. Certificates are valid from an hour before they were
// issued (package pki), so a step back of up to 30 minutes finds every
// certificate valid.
func (r *faultRun) clockJump() {
	n := r.pick(1)[0]
	d := time.Duration(1+r.rand.IntN(30)) * time.Minute
	if r.rand.IntN(2) == 0 {
		d = -d
	}
	for _, step := range []time.Duration{d, -d} {
		answer, err := n.VM.Control("clock "+step.String(), recoveryBound)
		if err != nil || !strings.HasPrefix(answer, "ok:") {
			r.t.Fatalf("node%d: stepping its clock by %v: %q, %v", n.Index+1, step, answer, err)
		}
		r.t.Logf("robustness: node%d: %s", n.Index+1, answer)
		time.Sleep(time.Duration(5+r.rand.IntN(6)) * time.Second)
		stepped := time.Now()
		for _, m := range r.nodes {
			r.awaitServing(m, stepped)
		}
		r.recovered(time.Since(stepped))
	}
}

// diskErrors fails one node's disk, every read and write EIO, for a few
// seconds, as a dying drive or a loose cable does: the node stops, saying
// why, while the others go on. Once the disk works again, a power cycle
// brings it back (a firmware that found no disk to boot from waits for
// one), serving within recoveryBound, its data whole.
func (r *faultRun) diskErrors() {
	n := r.pick(1)[0]
	r.t.Logf("robustness: node%d's disk fails", n.Index+1)
	if err := n.VM.FailDisks(true); err != nil {
		r.t.Fatal(err)
	}
	time.Sleep(time.Duration(5+r.rand.IntN(6)) * time.Second)
	if err := n.VM.FailDisks(false); err != nil {
		r.t.Fatal(err)
	}
	r.cut(n)
}

// slowDiskRate is a slow disk's rate, in bits a second: 128 KiB/s, a few
// of etcd's syncs a second on the data volume.
const slowDiskRate = 1 << 20

// slowDisk slows one node's disks to slowDiskRate for 10 to 20 s under
// the workload, as a worn drive or a rebuilding array does: meanwhile
// every other node must serve within recoveryBound, whichever node is
// slow (the leader too); once the disk is quick again, every node must.
func (r *faultRun) slowDisk() {
	n := r.pick(1)[0]
	r.t.Logf("robustness: node%d's disk slows to %d KiB/s", n.Index+1, slowDiskRate/8/1024)
	if err := n.VM.ThrottleDisks(slowDiskRate); err != nil {
		r.t.Fatal(err)
	}
	slowed := time.Now()
	for _, m := range r.nodes {
		if m != n {
			r.awaitServing(m, slowed)
		}
	}
	time.Sleep(time.Until(slowed.Add(time.Duration(10+r.rand.IntN(11)) * time.Second)))
	if err := n.VM.ThrottleDisks(0); err != nil {
		r.t.Fatal(err)
	}
	r.allServing(time.Now())
}

// fillVolume has someone else's runaway writer fill one node's data
// volume to its last block (the control port's fill): its space alarm
// stops the cluster's writes while reads go on; once the file is gone,
// every node must serve again within recoveryBound and the alarm clears
// by itself.
func (r *faultRun) fillVolume() {
	n := r.pick(1)[0]
	answer, err := n.VM.Control("fill", 5*time.Minute)
	if err != nil || !strings.HasPrefix(answer, "ok:") {
		r.t.Fatalf("node%d: filling its volume: %q, %v", n.Index+1, answer, err)
	}
	r.t.Logf("robustness: node%d: %s", n.Index+1, answer)
	time.Sleep(time.Duration(3+r.rand.IntN(6)) * time.Second)
	if answer, err = n.VM.Control("unfill", time.Minute); err != nil || !strings.HasPrefix(answer, "ok:") {
		r.t.Fatalf("node%d: emptying its volume: %q, %v", n.Index+1, answer, err)
	}
	healed := time.Now()
	r.allServing(healed)
	err = poll.Until(context.Background(), recoveryBound, time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := r.client(r.nodes...).Put(ctx, "robust-fill-check", "x")
		return err
	})
	if err != nil {
		r.t.Errorf("robustness: writes still refused %v after node%d's volume had room again: %v", recoveryBound, n.Index+1, err)
	}
}
