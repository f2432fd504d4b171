//go:build boot

package boottest

import (
	"bytes"
	"errors"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/borough-os/borough/internal/cmdline"
	"github.com/borough-os/borough/internal/ports"
	"github.com/borough-os/borough/qemu"
)

// cliFails runs the CLI expecting it to fail, and returns its output.
func cliFails(t testing.TB, args ...string) string {
	t.Helper()
	out, err := exec.Command(filepath.Join(outDir(t), "bin", "borough"), args...).CombinedOutput()
	if err == nil {
		t.Fatalf("borough %s succeeded:\n%s", strings.Join(args, " "), out)
	}
	return string(out)
}

// contains fails the test unless out has every one of want.
func contains(t testing.TB, what, out string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("%s has no %q:\n%s", what, w, out)
		}
	}
}

// checkNodeAPI reads a running node's info and logs through its API as
// its owner, and checks that nobody else can.
func checkNodeAPI(t *testing.T, config, api, fp, cluster string) {
	t.Helper()
	info := cli(t, "--config", config, "node", "info", api, "--fingerprint", fp, "--timeline")
	contains(t, "node info", info, "state        Running", "cluster      "+cluster, "member       node-",
		"version      ", "disk         vda virtio_blk", "nic          eth0 virtio_net", "boot timeline", "  running ")
	contains(t, "the storage log", cli(t, "--config", config, "logs", api, "storage"), "storage: data volume ")
	contains(t, "etcd's log", cli(t, "--config", config, "logs", api, "etcd"), "consensus/etcd: ")
	contains(t, "the kernel's log", cli(t, "--config", config, "logs", api, "kernel", "--since", "1h"), "kernel: Linux version 6.1")
	stranger := owner(t)
	out := cliFails(t, "--config", stranger, "logs", api, "--fingerprint", fp)
	contains(t, "a stranger's request", out, "certificate")
	out = cliFails(t, "--config", stranger, "node", "reboot", api, "--unverified")
	contains(t, "a stranger's reboot", out, "certificate")
}

// followReboot follows the node's log while its owner reboots it through
// the API, and returns what the follower printed: the stream lasts until
// the node stops its services.
func followReboot(t *testing.T, config, api string) string {
	t.Helper()
	var out lockedBuffer
	follow := exec.Command(filepath.Join(outDir(t), "bin", "borough"), "--config", config, "logs", api, "-f")
	follow.Stdout, follow.Stderr = &out, &out
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- follow.Wait() }()
	// The follower prints the log so far first, from the subscription
	// that then follows it.
	if err := waitUntil(stepTimeout, func() error {
		if out.String() == "" {
			return errors.New("the follower printed nothing")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	cli(t, "--config", config, "node", "reboot", api)
	select {
	case <-done:
	case <-time.After(stepTimeout):
		follow.Process.Kill()
		t.Fatalf("the follower did not end with the node's services:\n%s", out.String())
	}
	return out.String()
}

// lockedBuffer is a buffer a command writes while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestFailedNodeAPI boots a fresh node that must fail (its clock says
// 2001, before its owner's certificate, and it has no NTP server): its
// owner reads why through the node API, which has no cluster certificate
// to present yet, and powers it off; a stranger can do neither.
func TestFailedNodeAPI(t *testing.T) {
	t.Parallel()
	config, cfgFile := bootstrapped(t, "early")
	port := freePort(t)
	api := "127.0.0.1:" + strconv.Itoa(port)
	vm := boot(t, qemu.Options{Image: nodeImage(t, cmdline.PoweroffOnFatal), FwCfg: cfgFile, RTCBase: "2001-01-01",
		Forwards: []qemu.Forward{{Host: port, Guest: ports.NodeAPI}}})
	expect(t, vm, bootTimeout, "borough: node failed: enrolment config from fw_cfg opt/borough/enrolment: field bootstrap.owner_certificate: is not valid before")
	var info string
	if err := waitUntil(stepTimeout, func() error {
		out, err := exec.Command(filepath.Join(outDir(t), "bin", "borough"), "--config", config, "node", "info", api, "--unverified").CombinedOutput()
		info = string(out)
		return err
	}); err != nil {
		t.Fatalf("node info of a failed node: %v\n%s", err, info)
	}
	contains(t, "a failed node's info", info, "state        Failed", "failure      enrolment config from fw_cfg", "cluster      early")
	contains(t, "a failed node's log", cli(t, "--config", config, "logs", api, "--unverified"),
		"node: node failed: enrolment config", "network: network configured")
	contains(t, "verifying a node with no cluster", cliFails(t, "--config", config, "logs", api),
		"first use of "+api, "--node-key")
	contains(t, "a failed node's log, checked against its own key",
		cli(t, "--config", config, "logs", api, "--node-key", nodeKey(t, vm, 0)), "node: node failed: enrolment config")
	contains(t, "an earlier boot of a node without its data volume", cliFails(t, "--config", config, "logs", api, "--unverified", "--boot", "-1"),
		"not running")
	contains(t, "a stranger's request", cliFails(t, "--config", owner(t), "logs", api, "--unverified"), "certificate")
	cli(t, "--config", config, "node", "poweroff", api, "--unverified")
	if err := vm.Wait(powerTimeout); err != nil {
		t.Fatalf("the node did not power off when its owner asked: %v\n%s", err, vm.Tail(20))
	}
	expect(t, vm, time.Second, "the owner asked for a power-off")
}
