//go:build boot

package boottest

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/borough-os/borough/internal/cmdline"
	"github.com/borough-os/borough/qemu"
)

// putRuns is how many puts the latency figures cover.
const putRuns = 200

// BenchmarkCluster measures a one-node cluster: seconds from QEMU start
// to "node running" on first boot and from the reboot to "node running"
// again, the node process's resident memory and the machine's used memory
// when idle, and put latency from the host through the client port.
func BenchmarkCluster(b *testing.B) {
	config, cfgFile := bootstrapped(b, "bench")
	img := nodeImage(b)
	port := freePort(b)
	vm, err := qemu.Start(b.Context(), qemu.Options{Image: img, StateDir: b.TempDir(), Network: true, FwCfg: cfgFile,
		Forwards: []qemu.Forward{{Host: port, Guest: 2379}}, TestParams: cmdline.TestMemory + "=5"})
	if err != nil {
		b.Fatal(err)
	}
	defer vm.Kill()
	first, err := vm.WaitFor(running, bootTimeout)
	if err != nil {
		b.Fatal(err)
	}
	node := "127.0.0.1:" + strconv.Itoa(port)
	env := etcdEnv(b, config, node, fingerprint(b, vm))
	lat := putTimes(b, client(b, env, env["ETCDCTL_CERT"], env["ETCDCTL_KEY"]))
	if _, err := vm.WaitFor("borough: memory: test: memory", stepTimeout); err != nil {
		b.Fatal(err)
	}
	m := regexp.MustCompile(`test: memory node_rss_kib=(\d+) machine_used_kib=(\d+)`).FindAllStringSubmatch(vm.Console(), -1)
	rss, _ := strconv.Atoi(m[len(m)-1][1])
	used, _ := strconv.Atoi(m[len(m)-1][2])

	if err := vm.CtrlAltDel(); err != nil {
		b.Fatal(err)
	}
	down, err := vm.WaitFor("borough: rebooting", stepTimeout)
	if err != nil {
		b.Fatal(err)
	}
	up, err := vm.WaitFor(running, bootTimeout)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(first.Seconds(), "s-to-running")
	b.ReportMetric((up - down).Seconds(), "s-reboot-to-running")
	b.ReportMetric(float64(rss)/1024, "MiB-node-rss")
	b.ReportMetric(float64(used)/1024, "MiB-machine-used")
	b.ReportMetric(lat[0], "ms-put-p50")
	b.ReportMetric(lat[1], "ms-put-p99")
}

// putTimes returns the p50 and p99, in ms, of putRuns puts, one after
// another.
func putTimes(b *testing.B, c *clientv3.Client) [2]float64 {
	var lat []float64
	for i := range putRuns {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		start := time.Now()
		_, err := c.Put(ctx, "bench", fmt.Sprint(i))
		cancel()
		if err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start).Seconds()*1000)
	}
	slices.Sort(lat)
	return [2]float64{lat[len(lat)/2], lat[len(lat)*99/100]}
}
