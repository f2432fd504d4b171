//go:build boot

package boottest

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/borough-os/borough/qemu"
)

// smallMachine is the memory of the smallest machine a node must run on.
const smallMachine = 128

// TestSmallMachine boots a node on a machine of smallMachine MiB, first
// boot and restart: it formats its data volume, starts etcd and serves the
// owner a put and a get, both times. A payload unpacked into RAM, or a
// node that grew, is OOM-killed here.
func TestSmallMachine(t *testing.T) {
	t.Parallel()
	config, cfgFile := bootstrapped(t, "small")
	port := freePort(t)
	opts := qemu.Options{Image: nodeImage(t), StateDir: t.TempDir(), FwCfg: cfgFile, MemoryMiB: smallMachine,
		Forwards: []qemu.Forward{{Host: port, Guest: 2379}}}
	var env map[string]string
	for i, boot1 := range []bool{true, false} {
		vm := boot(t, opts)
		expect(t, vm, bootTimeout, running)
		if boot1 {
			env = etcdEnv(t, config, "127.0.0.1:"+strconv.Itoa(port), fingerprint(t, vm))
		}
		c := client(t, env, env["ETCDCTL_CERT"], env["ETCDCTL_KEY"])
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if boot1 {
			if _, err := c.Put(ctx, "small", "fits"); err != nil {
				t.Fatalf("put on a %d MiB machine: %v", smallMachine, err)
			}
		}
		get, err := c.Get(ctx, "small")
		cancel()
		if err != nil || len(get.Kvs) != 1 || string(get.Kvs[0].Value) != "fits" {
			t.Fatalf("boot %d: get on a %d MiB machine = %v, %v", i+1, smallMachine, get, err)
		}
		if err := vm.PowerOff(powerTimeout); err != nil {
			t.Fatal(err)
		}
	}
}
