//go:build boot

package boottest

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/borough-os/borough/internal/cmdline"
	"github.com/borough-os/borough/qemu"
)

// spaceVolume is the size, in MiB, TestSpace's node budgets its data
// volume as (cmdline.TestVolume): a quota of 74 MiB, which etcdctl fills
// in a minute under emulation; the real volume is the image's (722 MiB),
// so the filesystem itself never fills here.
const spaceVolume = 400

// TestSpace writes a node full through etcdctl, as the README's single
// node would be by an application: etcd's space alarm refuses writes
// while reads go on, `borough health` and `borough node info` say why, the node comes back
// serving after a power cut, and once the keys are deleted it takes
// writes again by itself (compaction, defragmentation, the alarm
// cleared), with nobody running etcdctl's maintenance commands.
func TestSpace(t *testing.T) {
	t.Parallel()
	config, cfgFile := bootstrapped(t, "space")
	// A fatal error reboots the node, as in the field: a runaway writer
	// may make etcd's own write fail once (volumeFilled).
	img := nodeImage(t)
	port, apiPort := freePort(t), freePort(t)
	node, api := "127.0.0.1:"+strconv.Itoa(port), "127.0.0.1:"+strconv.Itoa(apiPort)
	opts := qemu.Options{Image: img, StateDir: t.TempDir(), FwCfg: cfgFile, Control: true,
		TestParams: cmdline.TestVolume + "=" + strconv.Itoa(spaceVolume),
		Forwards:   []qemu.Forward{{Host: port, Guest: 2379}, {Host: apiPort, Guest: 7835}}}
	vm := boot(t, opts)
	expect(t, vm, bootTimeout, "borough: consensus: space budget volume=400MiB", running)
	fp := fingerprint(t, vm)
	env := etcdEnv(t, config, node, fp)
	value := filepath.Join(t.TempDir(), "value")
	if err := os.WriteFile(value, bytes.Repeat([]byte("v"), 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}

	puts := 0
	for ; ; puts++ {
		out, err := etcdctl(env, value, "put", "fill/"+strconv.Itoa(puts))
		if strings.Contains(out, "database space exceeded") {
			break
		}
		if err != nil || puts > 2*spaceVolume {
			t.Fatalf("put %d of 1 MiB: %v\n%s", puts, err, out)
		}
	}
	t.Logf("etcd's space alarm after %d puts of 1 MiB", puts)
	// The refused put may be stored all the same: etcd's quota check at
	// apply time stores the write that crosses the quota, then refuses.
	out, err := etcdctl(env, "", "get", "--prefix", "--keys-only", "fill/", "-w", "fields")
	count := regexp.MustCompile(`"Count" : (\d+)`).FindStringSubmatch(out)
	if err != nil || count == nil || (count[1] != strconv.Itoa(puts) && count[1] != strconv.Itoa(puts+1)) {
		t.Errorf("reading the full node: %v, want a count of %d or %d\n%s", err, puts, puts+1, out)
	}
	name := regexp.MustCompile(`member=(node-[0-9a-f]+)`).FindStringSubmatch(vm.Console())
	if name == nil {
		t.Fatal("the node printed no member name")
	}
	health := cliFails(t, "--config", config, "health", node, "--fingerprint", fp, "--api", name[1]+"="+api, "--max-clock-offset", "1h")
	contains(t, "borough health of the full node", health, "alarms: NOSPACE (writes refused: database")
	t.Logf("borough health of the full node:\n%s", health)
	info := cli(t, "--config", config, "node", "info", api, "--fingerprint", fp)
	contains(t, "borough node info of the full node", info, "alarms: NOSPACE (writes refused)")

	vm.Kill()
	vm = boot(t, opts)
	expect(t, vm, bootTimeout, running)
	if out, err := etcdctl(env, "", "get", "fill/0", "--print-value-only"); err != nil || len(out) < 1<<20 {
		t.Errorf("reading the full node after a power cut: %v (%d bytes)", err, len(out))
	}
	if out, _ := etcdctl(env, "", "put", "after-the-cut", "x"); !strings.Contains(out, "database space exceeded") {
		t.Errorf("a write to the full node after a power cut: %q, want the space alarm's refusal", out)
	}

	if out, err := etcdctl(env, "", "del", "--prefix", "fill/"); err != nil {
		t.Fatalf("deleting from the full node: %v\n%s", err, out)
	}
	deleted := time.Now()
	err = waitUntil(3*time.Minute, func() error {
		out, err := etcdctl(env, "", "put", "after-the-delete", "x")
		if err != nil {
			return &cmdError{out}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("writes still refused 3 minutes after the keys were deleted: %v", err)
	}
	t.Logf("writes back %.0f s after the keys were deleted", time.Since(deleted).Seconds())
	expect(t, vm, stepTimeout, "borough: consensus/space: compacted to the latest revision",
		"borough: consensus/space: defragmented etcd's database", "borough: consensus/space: etcd's space alarm cleared")
	volumeFilled(t, vm, env)
	powerOff(t, vm)
}

// volumeFilled has someone else's runaway writer fill the node's data
// volume to its last block (the control port's fill): the member stops
// taking writes and says why, at once or, when etcd's own write met the
// full filesystem first, after one restart that the ballast kept for a
// start lets etcd make; it keeps serving reads, never restarts in a loop,
// and takes writes again by itself once the file is gone.
func volumeFilled(t *testing.T, vm *qemu.VM, env map[string]string) {
	t.Helper()
	boots := strings.Count(vm.Console(), running)
	answer, err := vm.Control("fill", 5*time.Minute)
	if err != nil || !strings.HasPrefix(answer, "ok:") {
		t.Fatalf("filling the data volume: %q, %v", answer, err)
	}
	t.Logf("someone else's writer: %s", answer)
	var refusal string
	err = waitUntil(3*time.Minute, func() error {
		refusal, _ = etcdctl(env, "", "put", "on-a-full-volume", "x")
		if !strings.Contains(refusal, "database space exceeded") {
			return &cmdError{refusal}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("a write to a node whose volume someone else filled, want the space alarm's refusal: %v\n%s", err, vm.Tail(40))
	}
	if out, err := etcdctl(env, "", "get", "after-the-delete", "--print-value-only"); err != nil || strings.TrimSpace(out) != "x" {
		t.Errorf("reading a node whose volume someone else filled: %v\n%s", err, out)
	}
	if !regexp.MustCompile(`consensus/space: (error|warning): etcd's space alarm`).MatchString(vm.Console()) {
		t.Errorf("the console of a node whose volume someone else filled does not name the space alarm:\n%s", vm.Tail(40))
	}
	if answer, err := vm.Control("unfill", time.Minute); err != nil || !strings.HasPrefix(answer, "ok:") {
		t.Fatalf("deleting the file that filled the volume: %q, %v", answer, err)
	}
	err = waitUntil(3*time.Minute, func() error {
		if out, err := etcdctl(env, "", "put", "after-the-fill", "x"); err != nil {
			return &cmdError{out}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("writes still refused 3 minutes after the volume had room again: %v", err)
	}
	restarts := strings.Count(vm.Console(), running) - boots
	t.Logf("the node restarted %d times while its volume was full", restarts)
	if restarts > 1 {
		t.Errorf("the node restarted %d times while its volume was full, want at most once:\n%s", restarts, vm.Tail(60))
	}
}

// etcdctl runs Debian's etcdctl with env (etcdEnv's), its standard input
// the file stdin if any.
func etcdctl(env map[string]string, stdin string, args ...string) (string, error) {
	cmd := exec.Command("etcdctl", append([]string{"--command-timeout=30s"}, args...)...)
	cmd.Env = append(os.Environ(), "ETCDCTL_API=3")
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	if stdin != "" {
		f, err := os.Open(stdin)
		if err != nil {
			return "", err
		}
		defer f.Close()
		cmd.Stdin = f
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// cmdError is a command's output, as an error.
type cmdError struct{ out string }

func (e *cmdError) Error() string { return strings.TrimSpace(e.out) }
