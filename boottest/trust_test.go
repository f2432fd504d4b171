//go:build boot

package boottest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/borough-os/borough/esp"
	"github.com/borough-os/borough/image"
	"github.com/borough-os/borough/internal/cmdline"
	"github.com/borough-os/borough/internal/partition"
	"github.com/borough-os/borough/internal/secureboot"
	"github.com/borough-os/borough/internal/timeline"
	"github.com/borough-os/borough/internal/timesync/ntptest"
	"github.com/borough-os/borough/qemu"
)

// TestReleaseImage boots the image users get (out/borough.img, no test
// hooks) twice on a machine without an RNG device: it must reach node
// running both times, and ignore a test hook passed through fw_cfg that
// would make a test build fail at once.
func TestReleaseImage(t *testing.T) {
	t.Parallel()
	img := filepath.Join(t.TempDir(), "borough.img")
	if out, err := exec.Command("cp", "--sparse=always", filepath.Join(outDir(t), "borough.img"), img).CombinedOutput(); err != nil {
		t.Fatalf("copying the release image: %v\n%s", err, out)
	}
	state := t.TempDir()
	for boot1 := range 2 {
		vm := boot(t, qemu.Options{Image: img, StateDir: state, NoRNG: true, TestParams: cmdline.TestFatal + "=hooked"})
		expect(t, vm, bootTimeout, "borough: init started")
		expect(t, vm, stepTimeout, "borough: kernel lockdown: integrity: nothing on the node, root included, writes kernel memory",
			running)
		// A pool that was ready is seeded once the node runs.
		sawLine(t, vm, "borough: entropy: random pool seeded", stepTimeout)
		line, _, err := vm.WaitLine("borough: boot timeline", stepTimeout)
		if err != nil {
			t.Fatal(err)
		}
		checkTimeline(t, line)
		if strings.Contains(vm.Console(), "hooked") {
			t.Errorf("boot %d: the release image ran a test hook from fw_cfg", boot1+1)
		}
		if boot1 == 0 {
			expectSysRqLimited(t, vm)
		}
		powerOff(t, vm)
	}
}

// expectSysRqLimited asks the release kernel, from the VM's keyboard, for
// the blocked tasks (SysRq w, as qemu.VM does when a wait times out): it
// must refuse, as it refuses every SysRq function but sync and reboot.
func expectSysRqLimited(t *testing.T, vm *qemu.VM) {
	t.Helper()
	tail := sysrqAnswer(t, vm)
	if !strings.Contains(tail, "sysrq: This sysrq operation is disabled") || strings.Contains(tail, "sysrq: Show Blocked State") {
		t.Errorf("the release kernel did not refuse SysRq w:\n%s", tail)
	}
}

// checkTimeline checks that a boot timeline line has every phase, in boot
// order, at times that never go back.
func checkTimeline(t *testing.T, line string) {
	t.Helper()
	phases := []string{timeline.Init, timeline.PayloadMounted, timeline.NodeRead,
		timeline.Node, timeline.Network, timeline.Storage, timeline.EtcdReady, timeline.Running}
	re := regexp.MustCompile(` ([a-z-]+)=([0-9.]+)\(\+[0-9.]+\)`)
	var got []string
	last := 0.0
	for _, m := range re.FindAllStringSubmatch(line, -1) {
		at, _ := strconv.ParseFloat(m[2], 64)
		if at < last {
			t.Errorf("the boot timeline goes back at %s: %q", m[1], line)
		}
		got, last = append(got, m[1]), at
	}
	if !slices.Equal(got, phases) {
		t.Errorf("the boot timeline has the phases %q, want %q: %q", got, phases, line)
	}
}

// TestEntropy boots a node whose kernel distrusts the CPU's and the
// firmware's random numbers, with no RNG device: the node must credit the
// TPM's generator on its first boot, and the TPM and the seed file it
// left on the ESP on its second. (Whether the kernel's pool was ready
// before depends on timing noise, which a loaded machine has more of; the
// node says which.)
func TestEntropy(t *testing.T) {
	t.Parallel()
	img := nodeImage(t, cmdline.PoweroffOnFatal, "random.trust_cpu=off", "random.trust_bootloader=off")
	state := t.TempDir()
	for i, want := range []string{"credited=TPM", `credited="TPM,seed file"`} {
		vm := boot(t, qemu.Options{Image: img, StateDir: state, NoRNG: true, TPM: true})
		// Before the node runs, or after it if the pool was ready.
		expect(t, vm, bootTimeout, running)
		const seeded = "borough: entropy: random pool seeded"
		sawLine(t, vm, seeded, stepTimeout)
		line := grepConsole(vm.Console(), seeded)
		// The kernel's "crng init done" may land in the middle of it.
		if !strings.Contains(line, want) || (i == 0 && strings.Contains(line, "seed file")) {
			t.Errorf("boot %d: %q, want %s", i+1, line, want)
		}
		powerOff(t, vm)
	}
}

// TestCommandLineSeal plays an attacker with the machine and Secure Boot
// off: a boot entry for the node's own boot binary, with a command line
// of the attacker's choosing, leaves PCRs 4 and 7 as they were. The keys
// must not unseal in that boot (PCR 12 changed), the node must say so,
// and the next normal boot must unlock the volume with its data intact.
func TestCommandLineSeal(t *testing.T) {
	t.Parallel()
	img := nodeImage(t, cmdline.PoweroffOnFatal)
	state := t.TempDir()
	// The injected command line powers off on the fatal error, so that
	// the data partition can be checked before the next boot.
	const args = "console=ttyS0,115200 " + cmdline.PoweroffOnFatal + " borough.injected=1"
	vm := boot(t, qemu.Options{Image: img, StateDir: state, TPM: true,
		TestParams: cmdline.TestMarker + "=" + marker + " " + cmdline.TestBootEntry + `="` + args + `"`})
	expect(t, vm, bootTimeout, created, "borough: test: marker="+marker)
	expect(t, vm, stepTimeout, "borough: PCRs capped", "test: boot entry written and armed for the next boot")
	// The power button is watched before or after the entry is armed;
	// pressed before, the press is lost.
	if !strings.Contains(vm.Console(), ready) {
		expect(t, vm, stepTimeout, ready)
	}
	powerOff(t, vm)
	before := dataHash(t, img)

	// The firmware starts the armed entry once, then the default again.
	vm = boot(t, qemu.Options{Image: img, StateDir: state, TPM: true})
	expect(t, vm, bootTimeout, "Kernel command line: "+args)
	line, _, err := vm.WaitLine("borough: error: fatal: unsealing the local unlock key", stepTimeout)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(line, "changed: PCR 12 (the kernel command line") || strings.Contains(line, "PCR 4") || strings.Contains(line, "PCR 7") {
		t.Errorf("the node with the injected command line says %q, want PCR 12 alone named as changed", line)
	}
	expect(t, vm, stepTimeout, "borough: powering off")
	if err := vm.Wait(powerTimeout); err != nil {
		t.Fatal(err)
	}
	if dataHash(t, img) != before {
		t.Error("the boot with the injected command line changed the data partition")
	}

	vm = boot(t, qemu.Options{Image: img, StateDir: state, TPM: true, TestParams: cmdline.TestMarker})
	expect(t, vm, bootTimeout, unlocked, "borough: test: marker="+marker, running)
	powerOff(t, vm)
}

// TestSecureBoot gives a machine whose firmware is in setup mode an image
// signed with the owner's own keys: the node enrols them and reboots into
// Secure Boot, where it runs and seals its keys. With those keys enrolled,
// the firmware refuses a tampered and an unsigned boot binary; with Secure
// Boot off, the same disk and TPM do not unseal (PCR 7).
func TestSecureBoot(t *testing.T) {
	t.Parallel()
	keys := filepath.Join(t.TempDir(), "keys")
	if err := secureboot.Init(keys, "test"); err != nil {
		t.Fatal(err)
	}
	updates, err := secureboot.Updates(keys)
	if err != nil {
		t.Fatal(err)
	}
	unsigned := bootBinary(t, read(t, filepath.Join(testOut(t), "initramfs.cpio.zst")), cmdline.PoweroffOnFatal)
	signed, err := secureboot.Sign(unsigned, keys)
	if err != nil {
		t.Fatal(err)
	}
	img := writeImage(t, signed, updates)
	state := t.TempDir()
	vm := boot(t, qemu.Options{Image: img, StateDir: state, SecureBoot: true, TPM: true, TestParams: cmdline.TestMarker + "=" + marker})
	expect(t, vm, bootTimeout, "Secure Boot OFF", "setup_mode=true",
		"borough: enrolled the owner's Secure Boot keys", "borough: rebooting")
	expect(t, vm, bootTimeout, "borough: Secure Boot on", "borough: TPM 2.0 found", created+" path=/data tpm=true",
		"borough: test: marker="+marker, running)
	powerOff(t, vm)

	tampered := bytes.Replace(signed, []byte(image.DefaultCmdline), []byte(strings.Replace(image.DefaultCmdline, "panic=10", "panic=11", 1)), 1)
	if bytes.Equal(tampered, signed) {
		t.Fatal("found no command line to tamper with in the boot binary")
	}
	for _, tc := range []struct {
		name string
		boot []byte
	}{{"tampered", tampered}, {"unsigned", unsigned}} {
		dir := t.TempDir()
		copyState(t, filepath.Join(state, "OVMF_VARS.fd"), dir)
		vm := boot(t, qemu.Options{Image: writeImage(t, tc.boot, nil), StateDir: dir, SecureBoot: true})
		expect(t, vm, bootTimeout, "Access Denied")
		if strings.Contains(vm.Console(), "init started") {
			t.Errorf("the firmware started a %s boot binary", tc.name)
		}
		vm.Kill()
	}

	// The same disk and TPM on firmware without Secure Boot.
	off := t.TempDir()
	copyState(t, filepath.Join(state, "tpm"), off)
	vm = boot(t, qemu.Options{Image: img, StateDir: off, TPM: true})
	line, _, err := vm.WaitLine("borough: error: fatal: unsealing the local unlock key", bootTimeout)
	if err != nil {
		t.Fatal(err)
	}
	// PCR 4 may change too: the firmware without Secure Boot measures
	// its boot attempts differently.
	if !strings.Contains(line, "PCR 7 (the Secure Boot state or keys)") {
		t.Errorf("with Secure Boot off, the node says %q, want PCR 7 named as changed", line)
	}
	expect(t, vm, stepTimeout, "borough: powering off")
}

// copyState copies a file or directory of a VM's state into dir.
func copyState(t *testing.T, src, dir string) {
	t.Helper()
	if out, err := exec.Command("cp", "-a", src, dir).CombinedOutput(); err != nil {
		t.Fatalf("copying VM state: %v\n%s", err, out)
	}
}

// TestTwoCopies writes one image to two disks of one machine: the first
// boot must find the disk the firmware booted (both carry the same GUIDs)
// and give it new GUIDs; then the other disk boots too, as a node of its
// own.
func TestTwoCopies(t *testing.T) {
	t.Parallel()
	a := nodeImage(t, cmdline.PoweroffOnFatal)
	b := filepath.Join(t.TempDir(), "copy.img")
	if out, err := exec.Command("cp", "--sparse=always", a, b).CombinedOutput(); err != nil {
		t.Fatalf("copying the image: %v\n%s", err, out)
	}
	original := findPartition(t, b, partition.ESPType).GUID
	vm := boot(t, qemu.Options{Image: a, OtherDisks: []string{b}})
	expect(t, vm, bootTimeout, "found_by=\"LoaderDevicePartUUID and the boot entry's PCI path\"",
		"borough: storage: gave the disk and its partitions new GUIDs", created, running)
	powerOff(t, vm)
	if renewed := findPartition(t, a, partition.ESPType).GUID; strings.EqualFold(renewed, original) {
		t.Errorf("the booted disk's ESP kept the image's GUID %s", original)
	}
	if kept := findPartition(t, b, partition.ESPType).GUID; kept != original {
		t.Errorf("the other disk's ESP GUID changed from %s to %s", original, kept)
	}

	vm = boot(t, qemu.Options{Image: b, OtherDisks: []string{a}})
	expect(t, vm, bootTimeout, "found_by=LoaderDevicePartUUID", created, running)
	powerOff(t, vm)
}

// TestClockSync boots a node whose RTC says 2001 with an NTP server in its
// enrolment config (an SNTP server on this machine's loopback, which QEMU's
// user network reaches at 10.0.2.2): the node sets its clock before it
// makes its cluster CA, so the owner can use the cluster from here, where
// certificates dated 2001 would have expired long ago.
func TestClockSync(t *testing.T) {
	t.Parallel()
	srv, err := ntptest.Start(0)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	config := owner(t)
	cfgFile := filepath.Join(t.TempDir(), "enrolment.pb")
	cli(t, "--config", config, "enrolment", "bootstrap", "--cluster", "clock",
		"--ntp", "10.0.2.2:"+strconv.Itoa(srv.Port), "--out", cfgFile)
	port := freePort(t)
	vm := boot(t, qemu.Options{Image: nodeImage(t, cmdline.PoweroffOnFatal), FwCfg: cfgFile, RTCBase: "2001-01-01",
		Forwards: []qemu.Forward{{Host: port, Guest: 2379}}})
	line, _, err := vm.WaitLine("borough: time: clock set from NTP", bootTimeout)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(line, "was=2001-01-01") || !strings.Contains(line, "now="+strconv.Itoa(time.Now().UTC().Year())) {
		t.Errorf("clock line %q, want it set from 2001 to this year", line)
	}
	expect(t, vm, stepTimeout, running)
	node := "127.0.0.1:" + strconv.Itoa(port)
	env := etcdEnv(t, config, node, fingerprint(t, vm))
	c := client(t, env, env["ETCDCTL_CERT"], env["ETCDCTL_KEY"])
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := c.Put(ctx, "clock", "right"); err != nil {
		t.Errorf("put as the owner after the node set its clock: %v", err)
	}
	powerOff(t, vm)
}

// TestTamperedPayload changes the node payload on the ESP as an attacker
// with the disk would, keeping its name: a byte of the node binary in it
// (found as init reads the binary before it runs it), the whole of it for
// another build's (the release build's, cut or padded to the same length;
// found as init mounts it) and its end cut off (found as the verity table
// loads). dm-verity refuses each, and init fails before any node runs.
func TestTamperedPayload(t *testing.T) {
	t.Parallel()
	payload := read(t, filepath.Join(testOut(t), "node.squashfs"))
	sum := sha256.Sum256(payload)
	file := esp.NodePayload(hex.EncodeToString(sum[:]))
	flipped := bytes.Clone(payload)
	// A quarter in: in the node binary's data blocks, past the squashfs
	// superblock, before its tables and the verity tree.
	flipped[len(payload)/4] ^= 0x10
	other := read(t, filepath.Join(outDir(t), "node.squashfs"))
	other = append(other, make([]byte, max(0, len(payload)-len(other)))...)[:len(payload)]
	for _, tc := range []struct {
		name    string
		content []byte
		// refusal is dm-verity's line; failure how init says it stopped.
		refusal, failure string
	}{
		{"a byte changed", flipped, ": data block ", "read /bin/node: input/output error: a block of it does not match"},
		// The top block of the other tree does not match the root hash.
		{"another build's", other, "metadata block", "mount squashfs /dev/mapper/borough-node"},
		{"cut short", payload[:len(payload)/2], "Hash device is too small", "checking the node payload with dm-verity"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			img := nodeImage(t, cmdline.PoweroffOnFatal)
			writeESPFile(t, img, file, tc.content)
			vm := boot(t, qemu.Options{Image: img})
			expect(t, vm, bootTimeout, "borough: init started")
			expect(t, vm, stepTimeout, tc.refusal,
				"borough: error: fatal: loading the node: the node payload "+string(file)+": "+tc.failure,
				"borough: powering off")
			if strings.Contains(vm.Console(), "node process started") {
				t.Error("a node ran from the changed payload")
			}
		})
	}
}
