//go:build boot

package boottest

import (
	"context"
	"crypto/tls"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/borough-os/borough/internal/admin"
	"github.com/borough-os/borough/internal/keyspace"
	"github.com/borough-os/borough/internal/nodeapi"
	"github.com/borough-os/borough/internal/poll"
	"github.com/borough-os/borough/qemu/multinode"
	"github.com/borough-os/borough/soak"
)

// soakWindow is the soak's window: the table's rows, and how often every
// member restarts and the cluster defragments.
const soakWindow = 10 * time.Minute

// TestSoak keeps a three-node cluster of TPM nodes under package soak's
// load for HOURS (make soak HOURS=1): writes at a steady rate, leases
// that expire and one kept alive, a watch, compactions, and once a
// window, at its middle, a rolling restart (each member rebooted through
// the node API and serving before the next) and a defragmentation. Every
// 15 s it scrapes every node's metrics; at the end it prints the table
// by window and fails on a metric that rose past its bound (package
// soak states each), on a node that went a window unscraped, and on the
// load's own checks: every acknowledged put seen by the watch, the lease
// kept alive still holding its key. make test skips it: it runs hours.
// SOAK_WINDOW= shortens the window, to try the soak itself.
func TestSoak(t *testing.T) {
	hours := os.Getenv("HOURS")
	if hours == "" {
		t.Skip("make soak HOURS=1 runs it")
	}
	h, err := strconv.ParseFloat(hours, 64)
	if err != nil || h <= 0 {
		t.Fatalf("HOURS=%q is not a positive number of hours", hours)
	}
	window := soakWindow
	if s := os.Getenv("SOAK_WINDOW"); s != "" {
		if window, err = time.ParseDuration(s); err != nil || window < time.Minute {
			t.Fatalf("SOAK_WINDOW=%q is not a duration of a minute or more", s)
		}
	}
	total := time.Duration(h * float64(time.Hour))
	windows := int(total / window)
	if windows < 2 {
		t.Fatalf("HOURS=%s is under two windows of %v", hours, window)
	}
	config := owner(t)
	c := launch(t, config, multinode.Options{Nodes: 3, Image: nodeImage(t), Cluster: "soak", TPM: true})
	for _, n := range c.Nodes {
		awaitEscrow(t, n)
	}
	owner := ownerPair(t, config)
	cl, err := admin.Connect(c.Endpoints(), c.CA, owner)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()

	start := time.Now()
	t.Logf("soak: %d windows of %v, %s to %s", windows, window, start.Format(time.TimeOnly), start.Add(total).Format(time.TimeOnly))
	ctx, cancel := context.WithDeadline(context.Background(), start.Add(time.Duration(windows)*window))
	defer cancel()
	table := soak.NewTable(start, window)
	var wg sync.WaitGroup
	var tally *soak.Tally
	var loadErr error
	wg.Go(func() { tally, loadErr = soak.Load{Client: cl, Prefix: "soak/"}.Run(ctx) })
	wg.Go(func() { scrape(ctx, t, c, owner, table) })
	for w := range windows {
		mid := start.Add(time.Duration(w)*window + window/2)
		time.Sleep(time.Until(mid))
		t.Logf("soak: window %d of %d: a rolling restart and a defragmentation", w+1, windows)
		rollingRestart(t, c, config, owner)
		defragment(t, cl)
	}
	wg.Wait()
	if loadErr != nil {
		t.Fatal(loadErr)
	}
	t.Logf("soak: the load: %v", tally)
	t.Logf("soak: peaks by window:\n%s", table)
	if err := tally.Check(); err != nil {
		t.Errorf("soak: the load: %v", err)
	}
	if err := table.Check(windows); err != nil {
		t.Errorf("soak: %v", err)
	}
}

// scrape reads every node's metrics each 15 s into table until ctx ends,
// as a Prometheus server would; a node rebooting is skipped that round.
func scrape(ctx context.Context, t *testing.T, c *multinode.Cluster, owner tls.Certificate, table *soak.Table) {
	tick := time.NewTicker(15 * time.Second)
	defer tick.Stop()
	for {
		for _, n := range c.Nodes {
			sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			families, err := (&nodeapi.Client{Addr: n.API(), Owner: owner, CA: c.CA, ServerName: n.Name}).Metrics(sctx)
			cancel()
			if err == nil {
				table.Add(n.Name, time.Now(), families)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// slowReboot is a reboot slow enough to show what it waited on: most
// take 20 to 30 s under TCG.
const slowReboot = 40 * time.Second

// rollingRestart reboots every member in turn through the owner's `borough
// node reboot`, each serving a linearizable read through its own client
// port before the next goes down, so that the cluster keeps its quorum.
func rollingRestart(t *testing.T, c *multinode.Cluster, config string, owner tls.Certificate) {
	for _, n := range c.Nodes {
		began, from := time.Now(), len(n.VM.Console())
		cli(t, "--config", config, "node", "reboot", n.API(), "--fingerprint", c.Fingerprint)
		if _, err := n.VM.WaitFor("borough: rebooting", time.Minute); err != nil {
			t.Fatalf("node%d: %v", n.Index+1, err)
		}
		if err := c.WaitRunning(n); err != nil {
			t.Fatal(err)
		}
		cl, err := admin.Connect([]string{n.Endpoint()}, c.CA, owner)
		if err != nil {
			t.Fatal(err)
		}
		err = poll.Until(context.Background(), time.Minute, 500*time.Millisecond, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_, err := cl.Get(ctx, "soak/start")
			return err
		})
		cl.Close()
		if err != nil {
			t.Fatalf("node%d does not serve a minute after it rebooted: %v", n.Index+1, err)
		}
		took := time.Since(began)
		t.Logf("soak: node%d rebooted and serves again in %v", n.Index+1, took.Round(100*time.Millisecond))
		if took > slowReboot {
			t.Logf("soak: node%d's reboot took over %v; its console meanwhile:\n%s", n.Index+1, slowReboot,
				consoleLines(n.VM.Console()[from:], func(l string) bool { return strings.Contains(l, "borough: ") }))
		}
	}
}

// defragment asks every member to defragment, as `borough cluster defrag`
// does, and waits until each has.
func defragment(t *testing.T, cl *clientv3.Client) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rev, err := admin.RequestDefrag(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	report := func(name string, r keyspace.SpaceReport) {
		t.Logf("soak: %s defragmented: database %.1f MiB, %.1f MiB in use", name, float64(r.DB)/(1<<20), float64(r.InUse)/(1<<20))
	}
	if err := admin.AwaitDefrag(ctx, cl, rev, report); err != nil {
		t.Fatalf("soak: the members' defragmentation: %v", err)
	}
}
