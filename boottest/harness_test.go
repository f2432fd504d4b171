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

// outDir is the build output: vmlinuz, initramfs.cpio.zst, node.cpio.zst.
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

// buildImage builds a disk image in a temporary directory whose kernel
// command line has params appended, with the given initramfs and the built
// node payload on its ESP.
func buildImage(t testing.TB, initramfs []byte, params ...string) string {
	t.Helper()
	out := outDir(t)
	boot, err := image.BootBinary(image.BootParams{
		Stub:      read(t, uki.DebianStub),
		Kernel:    read(t, filepath.Join(out, "vmlinuz")),
		Initramfs: initramfs,
		Cmdline:   strings.Join(append([]string{image.DefaultCmdline}, params...), " "),
		Version:   "test",
	})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "borough.img")
	payload := read(t, filepath.Join(out, "node.cpio.zst"))
	if err := image.Build(path, image.Params{BootBinary: boot, NodePayload: payload, Size: image.DefaultSize}); err != nil {
		t.Fatal(err)
	}
	return path
}

// nodeImage builds an image of the node's own initramfs.
func nodeImage(t testing.TB, params ...string) string {
	t.Helper()
	return buildImage(t, read(t, filepath.Join(outDir(t), "initramfs.cpio.zst")), params...)
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
	t.Cleanup(vm.Kill)
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
