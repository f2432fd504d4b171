//go:build boot

package boottest

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/borough-os/borough/internal/cmdline"
	"github.com/borough-os/borough/internal/initramfs"
	"github.com/borough-os/borough/qemu"
)

// TestRecovery makes a volume with a node (no TPM, so its keys are in
// clear on the ESP), copies the keys off the image with `borough recovery
// keys`, derives the volume key with `borough recovery volume-key`, and
// opens the volume in a guest with the cryptsetup command that it prints
// (openInGuest).
func TestRecovery(t *testing.T) {
	t.Parallel()
	img := nodeImage(t, cmdline.PoweroffOnFatal)
	contains(t, "recovery keys of a never-booted image", cliFails(t, "recovery", "keys", img, "--out", t.TempDir()),
		"holds no unlock keys: its node never made a data volume")
	vm := boot(t, qemu.Options{Image: img, TestParams: cmdline.TestMarker + "=" + marker})
	expect(t, vm, bootTimeout, created, "borough: test: marker="+marker, ready)
	powerOff(t, vm)

	dir := t.TempDir()
	cli(t, "recovery", "keys", img, "--out", dir)
	out := cli(t, "recovery", "volume-key", img, "--luk", filepath.Join(dir, "luk.key"),
		"--cuk", filepath.Join(dir, "cuk.key"), "--out", filepath.Join(dir, "volume.key"))
	vm, _ = openInGuest(t, img, filepath.Join(dir, "volume.key"), out)
	expect(t, vm, bootTimeout, "recovery: marker="+marker)
	if err := vm.Wait(powerTimeout); err != nil {
		t.Fatal(err)
	}
}

// openInGuest runs the cryptsetup command that `borough recovery
// volume-key` printed (out), unchanged but for the device and key paths,
// in a guest that has disk as its second disk, and returns the guest once
// it has mounted the volume, with the line that says what it holds.
func openInGuest(t *testing.T, disk, keyFile, out string) (*qemu.VM, string) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	args := strings.Fields(lines[len(lines)-1])
	if len(args) < 2 || args[0] != "cryptsetup" {
		t.Fatalf("volume-key printed no cryptsetup command:\n%s", out)
	}
	for i, a := range args {
		switch a {
		case disk:
			args[i] = "/dev/vdb"
		case keyFile:
			args[i] = "/recovery/volume.key"
		case "cryptsetup":
			args[i] = "/sbin/cryptsetup"
		}
	}
	dir := t.TempDir()
	argsFile := filepath.Join(dir, "args")
	if err := os.WriteFile(argsFile, []byte(strings.Join(args, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "recoveryinit")
	build := exec.Command("go", "build", "-o", bin, "./recoveryinit")
	build.Env = append(build.Environ(), "CGO_ENABLED=0")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building recoveryinit: %v\n%s", err, b)
	}
	var ramfs bytes.Buffer
	err := initramfs.Build(&ramfs, initramfs.Params{Init: bin, Files: []string{
		"/sbin/cryptsetup",
		keyFile + ":recovery/volume.key",
		argsFile + ":recovery/args",
	}})
	if err != nil {
		t.Fatal(err)
	}
	vm := boot(t, qemu.Options{Image: buildImage(t, ramfs.Bytes()), ExtraDisks: []string{disk}})
	line, _, err := vm.WaitLine("recovery: the volume holds:", bootTimeout)
	if err != nil {
		t.Fatal(err)
	}
	return vm, line
}

// cli runs the built host CLI and returns its output.
func cli(t testing.TB, args ...string) string {
	t.Helper()
	out, err := exec.Command(filepath.Join(outDir(t), "bin", "borough"), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("borough %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}
