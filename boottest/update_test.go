//go:build boot

package boottest

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/borough-os/borough/internal/cmdline"
	"github.com/borough-os/borough/qemu"
)

// versionedImage is nodeImage of the given version.
func versionedImage(t testing.TB, version string, params ...string) string {
	t.Helper()
	initramfs := read(t, filepath.Join(testOut(t), "initramfs.cpio.zst"))
	return writeImage(t, versionedBootBinary(t, initramfs, version, params...), nil)
}

// TestUpdate runs one node with a TPM through A/B updates by its owner:
// an update whose new system fails before it runs, and one whose try boot
// loses power, each back on the old version by itself with its data and
// its keys sealed to it alone again; then one that confirms, unseals the
// keys sealed ahead to its predicted PCR 4 and settles them on itself, and
// a reboot that stays on it; and a downgrade, refused.
func TestUpdate(t *testing.T) {
	t.Parallel()
	config, cfgFile := bootstrapped(t, "updates")
	v1, v2 := versionedImage(t, "1.0.0"), versionedImage(t, "1.1.0")
	failing := versionedImage(t, "1.2.0", cmdline.TestFatal+"=the-new-version-fails")
	port, apiPort := freePort(t), freePort(t)
	api := "127.0.0.1:" + strconv.Itoa(apiPort)
	opts := qemu.Options{Image: v1, StateDir: t.TempDir(), FwCfg: cfgFile, Watchdog: true, TPM: true,
		Forwards: []qemu.Forward{{Host: port, Guest: 2379}, {Host: apiPort, Guest: 7835}}}
	vm := boot(t, opts)
	expect(t, vm, bootTimeout, "borough: update: boot slot A version=1.0.0 boot=normal", running)
	fp := fingerprint(t, vm)
	env := etcdEnv(t, config, "127.0.0.1:"+strconv.Itoa(port), fp)
	greet := func(t *testing.T, want string) {
		t.Helper()
		c := client(t, env, env["ETCDCTL_CERT"], env["ETCDCTL_KEY"])
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if want == "" {
			if _, err := c.Put(ctx, "greeting", "from 1.0.0"); err != nil {
				t.Fatal(err)
			}
			return
		}
		get, err := c.Get(ctx, "greeting")
		if err != nil || len(get.Kvs) != 1 || string(get.Kvs[0].Value) != want {
			t.Errorf("greeting = %v, %v; want %q", get, err, want)
		}
	}
	greet(t, "")
	parent := t
	contains(t, "node info", cli(t, "--config", config, "node", "info", api, "--fingerprint", fp),
		"version      1.0.0", "boot slot    A")

	t.Run("the new system fails", func(t *testing.T) {
		out := cliFails(t, "--config", config, "update", api, failing)
		contains(t, "update", out, "installed 1.2.0 in slot B", "rolled back to 1.0.0 in slot A")
		expect(t, vm, stepTimeout, "borough: update: keys sealed to the new boot binary too",
			"borough: update: boot slot B version=1.2.0 boot=\"try boot\"",
			"try boot: watchdog armed", "fatal: testhook: "+cmdline.TestFatal+": the-new-version-fails")
		expect(t, vm, bootTimeout, "the update to 1.2.0 in slot B did not confirm itself: rolled back to 1.0.0 in slot A",
			"borough: update: keys sealed to this boot binary alone", running)
		greet(t, "from 1.0.0")
	})

	t.Run("power cut in the try boot", func(t *testing.T) {
		var out bytes.Buffer
		upd := exec.Command(filepath.Join(outDir(t), "bin", "borough"), "--config", config, "update", api, v2)
		upd.Stdout, upd.Stderr = &out, &out
		if err := upd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = upd.Process.Kill() })
		// The install, sealing ahead and the reboot each take a step's
		// time; the try boot, a boot's.
		expect(t, vm, stepTimeout, "borough: update: keys sealed to the new boot binary too")
		expect(t, vm, bootTimeout, "borough: update: boot slot B version=1.1.0 boot=\"try boot\"")
		vm.Kill()
		vm = boot(parent, opts) // the VM outlives this case

		expect(t, vm, bootTimeout, "the update to 1.1.0 in slot B did not confirm itself: rolled back to 1.0.0 in slot A",
			"borough: update: keys sealed to this boot binary alone", running)
		if err := upd.Wait(); err == nil {
			t.Errorf("update succeeded through a power cut:\n%s", out.String())
		}
		contains(t, "update", out.String(), "rolled back to 1.0.0 in slot A")
		greet(t, "from 1.0.0")
	})

	t.Run("confirmed", func(t *testing.T) {
		out := cli(t, "--config", config, "update", api, v2)
		contains(t, "update", out, "installed 1.1.0 in slot B", "updated: slot B runs 1.1.0, confirmed")
		expect(t, vm, stepTimeout, "borough: storage: data volume unlocked and mounted", "borough: update: keys sealed to this boot binary alone",
			"update confirmed: slot B runs 1.1.0 and boots by default")
		greet(t, "from 1.0.0")
		cli(t, "--config", config, "node", "reboot", api)
		expect(t, vm, bootTimeout, "borough: update: boot slot B version=1.1.0 boot=normal", running)
		contains(t, "node info", cli(t, "--config", config, "node", "info", api),
			"version      1.1.0", "boot slot    B", "update       confirmed: 1.1.0 in slot B (from 1.0.0)")
	})

	t.Run("downgrade refused", func(t *testing.T) {
		contains(t, "a downgrade", cliFails(t, "--config", config, "update", api, v1),
			"version 1.0.0 is older than the running 1.1.0: a downgrade")
	})
	powerOff(t, vm)
}
