//go:build boot

package boottest

import (
	"strconv"
	"strings"
	"testing"

	"github.com/borough-os/borough/qemu"
)

// TestDiskErrors fails a node's disk under it (nbdkit's error filter:
// every read and write fails with EIO), as a dying drive or a loose cable
// does: the node stops writing and says why, and once the disk works
// again, a power cycle brings it back with its data: nothing reformatted,
// the key written before the fault read back.
func TestDiskErrors(t *testing.T) {
	t.Parallel()
	config, cfgFile := bootstrapped(t, "disk-errors")
	port := freePort(t)
	opts := qemu.Options{Image: nodeImage(t), StateDir: t.TempDir(), FwCfg: cfgFile, DiskFaults: true,
		Forwards: []qemu.Forward{{Host: port, Guest: 2379}}}
	vm := boot(t, opts)
	expect(t, vm, bootTimeout, running)
	env := etcdEnv(t, config, "127.0.0.1:"+strconv.Itoa(port), fingerprint(t, vm))
	if out, err := etcdctl(env, "", "put", "before", "the fault"); err != nil {
		t.Fatalf("a write before the fault: %v\n%s", err, out)
	}

	if err := vm.FailDisks(true); err != nil {
		t.Fatal(err)
	}
	if out, err := etcdctl(env, "", "put", "during", "the fault"); err == nil {
		t.Errorf("a write while the disk fails succeeded:\n%s", out)
	}
	// The kernel sees the error, etcd says what it could not write, and
	// the node stops rather than run on a disk it cannot write.
	expect(t, vm, stepTimeout, "I/O error, dev vda", "input/output error", "borough: error: fatal: ")
	t.Logf("the console as the disk failed:\n%s", vm.Tail(12))

	if err := vm.FailDisks(false); err != nil {
		t.Fatal(err)
	}
	vm.Kill()
	vm = boot(t, opts)
	expect(t, vm, bootTimeout, "borough: storage: data volume unlocked and mounted", running)
	if strings.Contains(vm.Console(), "data volume created") {
		t.Errorf("the node made a new data volume after its disk failed:\n%s", vm.Tail(40))
	}
	if out, err := etcdctl(env, "", "get", "before", "--print-value-only"); err != nil || strings.TrimSpace(out) != "the fault" {
		t.Errorf("reading the key written before the fault: %v\n%s", err, out)
	}
	powerOff(t, vm)
}
