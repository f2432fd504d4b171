//go:build boot

package boottest

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/borough-os/borough/image"
	"github.com/borough-os/borough/internal/ownerkey"
	"github.com/borough-os/borough/internal/poll"
	"github.com/borough-os/borough/internal/uki"
	"github.com/borough-os/borough/qemu"
)

// Timeouts for console waits. Under TCG, OVMF reaches the kernel in about
// 3.5 s and init a second later; these leave room for a loaded machine.
const (
	bootTimeout  = 120 * time.Second
	stepTimeout  = 60 * time.Second
	powerTimeout = 60 * time.Second
)

// outDir is the build output: vmlinuz, the release image borough.img, and
// test/ with the test build's initramfs.cpio.zst and node.squashfs.
func outDir(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("BOROUGH_OUT")
	if dir == "" {
		t.Fatal("BOROUGH_OUT is not set: run the boot tests through `make test`, after ./build.sh")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

func read(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading build output (run ./build.sh): %v", err)
	}
	return b
}

// testOut is the test build's output (build.sh): the node with its test
// hooks, and an initramfs whose init verifies that node.
func testOut(t testing.TB) string {
	return filepath.Join(outDir(t), "test")
}

// buildImage builds a disk image in a temporary directory whose kernel
// command line has params appended, with the given initramfs and the test
// build's node payload on its ESP.
func buildImage(t testing.TB, initramfs []byte, params ...string) string {
	t.Helper()
	return writeImage(t, bootBinary(t, initramfs, params...), nil)
}

// bootBinary builds a boot binary with the given initramfs, its kernel
// command line with params appended.
func bootBinary(t testing.TB, initramfs []byte, params ...string) []byte {
	t.Helper()
	return versionedBootBinary(t, initramfs, "test", params...)
}

// testCmdline is on the command line of every boot binary a boot test
// builds: SysRq in full, which the release kernel limits to sync and
// reboot, so that a hang's timeout shows the blocked tasks (SysRq w).
const testCmdline = "sysrq_always_enabled"

// versionedBootBinary is bootBinary of the given version.
func versionedBootBinary(t testing.TB, initramfs []byte, version string, params ...string) []byte {
	t.Helper()
	boot, err := image.BootBinary(image.BootParams{
		Stub:      read(t, uki.DebianStub),
		Kernel:    read(t, filepath.Join(outDir(t), "vmlinuz")),
		Initramfs: initramfs,
		Cmdline:   strings.Join(append([]string{image.DefaultCmdline, testCmdline}, params...), " "),
		Version:   version,
	})
	if err != nil {
		t.Fatal(err)
	}
	return boot
}

// writeImage writes a disk image in a temporary directory with boot, the
// test build's node payload and Secure Boot key updates on its ESP.
func writeImage(t testing.TB, boot []byte, updates map[string][]byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "borough.img")
	payload := read(t, filepath.Join(testOut(t), "node.squashfs"))
	err := image.Build(path, image.Params{BootBinary: boot, NodePayload: payload, SecureBootUpdates: updates, Size: image.DefaultSize})
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// nodeImage builds an image of the test build of the node.
func nodeImage(t testing.TB, params ...string) string {
	t.Helper()
	return buildImage(t, read(t, filepath.Join(testOut(t), "initramfs.cpio.zst")), params...)
}

// boot starts a VM with a NIC and progress logged to the test, and kills
// it when the test ends. Without a StateDir, the VM gets a fresh one.
func boot(t testing.TB, opts qemu.Options) *qemu.VM {
	t.Helper()
	if opts.StateDir == "" {
		opts.StateDir = filepath.Join(t.TempDir(), "vm")
	}
	opts.Network = true
	opts.Logf = t.Logf
	vm, err := qemu.Start(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the console's tail:\n%s", vm.Tail(40))
		}
		vm.Kill()
	})
	return vm
}

// expect waits for each line in turn, failing the test with the console's
// tail if one does not come.
func expect(t testing.TB, vm *qemu.VM, timeout time.Duration, lines ...string) {
	t.Helper()
	for _, l := range lines {
		if _, err := vm.WaitFor(l, timeout); err != nil {
			t.Fatal(err)
		}
	}
}

// sawLine waits up to timeout for line anywhere on the console, before or
// after expect's cursor: for what a node logs from the background.
func sawLine(t testing.TB, vm *qemu.VM, line string, timeout time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(timeout); !strings.Contains(vm.Console(), line); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("console did not show %q within %v\n%s", line, timeout, vm.Tail(20))
		}
	}
}

// TestMain gives the borough commands the tests run the passphrase of the
// test owners' keys, and logs the host's load while they run (hostLoad).
func TestMain(m *testing.M) {
	os.Setenv(ownerkey.PassphraseEnv, testPassphrase)
	stop := make(chan struct{})
	go hostLoad(stop)
	code := m.Run()
	close(stop)
	os.Exit(code)
}

// waitUntil calls f every half second until it returns nil, and returns
// its last error if timeout passes first (package poll).
func waitUntil(timeout time.Duration, f func() error) error {
	return poll.Until(context.Background(), timeout, 500*time.Millisecond, f)
}
