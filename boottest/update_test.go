//go:build boot

package boottest

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/borough-os/borough/esp"
	"github.com/borough-os/borough/internal/cmdline"
	"github.com/borough-os/borough/internal/nodeapi"
	"github.com/borough-os/borough/internal/update"
	"github.com/borough-os/borough/proto/nodepb"
	"github.com/borough-os/borough/qemu"
)

// versionedImage is nodeImage of the given version.
func versionedImage(t testing.TB, version string, params ...string) string {
	t.Helper()
	initramfs := read(t, filepath.Join(testOut(t), "initramfs.cpio.zst"))
	return writeImage(t, versionedBootBinary(t, initramfs, version, params...), nil)
}

// signedImage is versionedImage signed by the owner of config (`borough
// image sign`), for the owner's nodes to take as an update.
func signedImage(t testing.TB, config, version string, params ...string) string {
	t.Helper()
	img := versionedImage(t, version, params...)
	cli(t, "--config", config, "image", "sign", img)
	return img
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
	v1, v2 := versionedImage(t, "1.0.0"), signedImage(t, config, "1.1.0")
	failing := signedImage(t, config, "1.2.0", cmdline.TestFatal+"=the-new-version-fails")
	port, apiPort := freePort(t), freePort(t)
	api := "127.0.0.1:" + strconv.Itoa(apiPort)
	opts := qemu.Options{Image: v1, StateDir: t.TempDir(), FwCfg: cfgFile, Watchdog: true, TPM: true, Control: true,
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

	t.Run("refused before a byte is written", func(t *testing.T) {
		refusedUpdates(t, config, api, failing)
	})

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

	// Firmware that loses or reorders its boot entries (a firmware update,
	// a flat CMOS battery) starts slot A, whose boot binary is also what
	// it starts without an entry, while the node's keys are sealed to
	// slot B's: the node writes its entries again and reboots into slot
	// B, by itself.
	t.Run("boot entries lost or reordered", func(t *testing.T) {
		for _, change := range []string{"efi first A", "efi drop"} {
			answer, err := vm.Control(change, time.Minute)
			if err != nil || !strings.HasPrefix(answer, "ok:") {
				t.Fatalf("%s: %q, %v", change, answer, err)
			}
			powerOff(t, vm)
			vm = boot(parent, opts)
			expect(t, vm, bootTimeout, "borough: update: boot slot A version=1.0.0 boot=normal",
				"the firmware started slot A, but this node runs slot B (its boot entries were lost or reordered)",
				"borough: update: boot slot B version=1.1.0 boot=normal", running)
		}
		greet(t, "from 1.0.0")
	})

	t.Run("downgrade refused", func(t *testing.T) {
		cli(t, "--config", config, "image", "sign", v1)
		contains(t, "a downgrade", cliFails(t, "--config", config, "update", api, v1),
			"version 1.0.0 is older than the running 1.1.0: a downgrade needs the owner's statement for it")
	})

	// Someone who writes the disk while the node is off forges the update
	// record into a try boot that never confirms: the node arms the
	// watchdog on its word, the ESP's ledger refuses it, and the node
	// disarms the watchdog and runs its confirmed version.
	t.Run("forged update record", func(t *testing.T) {
		powerOff(t, vm)
		writeESPFile(t, opts.Image, esp.UpdateRecord, []byte(`{"version": 1, "state": "trying", "slot": "B", "from": "A",
			"new_version": "1.1.0", "old_version": "1.0.0"}`))
		vm = boot(parent, opts)
		expect(t, vm, bootTimeout, "borough: update: boot slot B version=1.1.0 boot=\"try boot\"", "try boot: watchdog armed",
			"refusing the update record: this boot is a normal one", running)
		if strings.Contains(vm.Console(), "update confirmed") {
			t.Error("the node confirmed an update on a forged record's word")
		}
	})
	powerOff(t, vm)
}

// refusedUpdates sends the node at api, which runs 1.0.0 from slot A and
// has installed nothing yet, the updates an attacker would (e): unsigned
// (straight to the node API, as the CLI refuses to send it), with another
// version's statement, with a boot binary changed after it
// was signed, signed by another key. Each is refused with the reason,
// and slot B stays empty. other is an image of 1.2.0 that the owner of
// config signed.
func refusedUpdates(t *testing.T, config, api, other string) {
	unsigned := versionedImage(t, "1.1.0")
	boot := readESPFile(t, unsigned, esp.BootBinary)
	sha, err := update.PayloadSHA(boot)
	if err != nil {
		t.Fatal(err)
	}
	c := &nodeapi.Client{Addr: api, Owner: ownerPair(t, config), Unverified: true}
	_, err = c.Update(context.Background(), &nodepb.UpdateRequest{BootBinary: boot, Payload: readESPFile(t, unsigned, esp.NodePayload(sha))})
	if err == nil || !strings.Contains(err.Error(), "the update is not signed") {
		t.Errorf("an unsigned update sent straight to the node API: %v, want refused as not signed", err)
	}
	swapped := versionedImage(t, "1.1.0")
	writeESPFile(t, swapped, esp.ReleaseStatement, readESPFile(t, other, esp.ReleaseStatement))
	tampered := signedImage(t, config, "1.1.0")
	writeESPFile(t, tampered, esp.BootBinary, append(readESPFile(t, tampered, esp.BootBinary), 0))
	stranger := versionedImage(t, "1.1.0")
	cli(t, "--config", owner(t), "image", "sign", stranger)
	for _, tc := range []struct{ name, img, reason string }{
		{"unsigned, through the CLI", unsigned, "release.sig is not on the ESP"},
		{"another version's statement", swapped, "the owner signed version 1.2.0, but the update's boot binary is version 1.1.0"},
		{"boot binary changed", tampered, "the update's boot binary is not the one the owner signed for version 1.1.0"},
		{"signed by another key", stranger, "the statement is not signed by this node's owner"},
	} {
		contains(t, tc.name, cliFails(t, "--config", config, "update", api, tc.img), tc.reason)
	}
	info := cli(t, "--config", config, "node", "info", api)
	contains(t, "node info after refused updates", info, "version      1.0.0", "boot slot    A")
	if strings.Contains(info, "update  ") {
		t.Errorf("a refused update was recorded:\n%s", info)
	}
}
