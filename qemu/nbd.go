package qemu

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/borough-os/borough/internal/atomicfile"
)

// servedDisk serves a raw image over NBD on a unix socket through
// nbdkit, for what a file in place cannot do: a volatile write cache
// (Options.VolatileCache), a drive that fails or slows down while the VM
// runs (Options.DiskFaults) or is slow from the start (Options.SlowDisk). With the cache filter in writeback mode a
// write reaches the image only when the client flushes, as on a drive
// with a volatile write cache, and cut loses the rest, as a power cut
// does. Killing QEMU alone is a kinder cut: QEMU's writes sit in the
// host's page cache and survive it, whether or not the guest ever
// flushed them. nbdkit (a Debian package) does the caching, the errors,
// the throttling and the delays: writing an NBD server here would be more code to trust
// than the properties it tests.
type servedDisk struct {
	cmd    *exec.Cmd
	socket string
}

// startServedDisk serves image, disk i of a VM of o, on a socket in
// o.StateDir, with nbdkit's cache there too.
func (o *Options) startServedDisk(ctx context.Context, image string, i int) (*servedDisk, error) {
	d := &servedDisk{socket: servedSocket(o.StateDir, i)}
	_ = os.Remove(d.socket)
	d.cmd = exec.CommandContext(ctx, "nbdkit", o.nbdkitArgs(image, d.socket)...)
	d.cmd.Env = append(os.Environ(), "TMPDIR="+o.StateDir)
	var stderr strings.Builder
	d.cmd.Stderr = &stderr
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := d.cmd.Start(); err != nil {
		return nil, fmt.Errorf("qemu: starting nbdkit for %s (apt-get install nbdkit): %w", image, err)
	}
	if awaitSocket(d.socket) {
		return d, nil
	}
	d.cut()
	return nil, fmt.Errorf("qemu: nbdkit did not create its socket for %s: %s", image, stderr.String())
}

// fullRate is the rate filter's rate while a DiskFaults VM's disks are
// not throttled: far over anything QEMU under emulation asks of them.
const fullRate = "100G"

// nbdkitArgs serves image on socket with the filters o asks for: the
// errors outermost, so that a failing drive fails before its cache, then
// the throttle (the rate filter, its rate read from a file the test
// rewrites), so that a slow drive is slow to flush.
func (o *Options) nbdkitArgs(image, socket string) []string {
	args := []string{"--foreground", "--exit-with-parent", "--unix", socket}
	var params []string
	if o.DiskFaults {
		args = append(args, "--filter=error", "--filter=rate")
		params = append(params, "error=EIO", "error-rate=100%", "error-file="+o.diskFailFile(),
			"rate="+fullRate, "rate-file="+o.diskRateFile())
	}
	if o.SlowDisk > 0 {
		ms := strconv.FormatInt(o.SlowDisk.Milliseconds(), 10) + "ms"
		args = append(args, "--filter=delay")
		params = append(params, "delay-read="+ms, "delay-write="+ms)
	}
	if o.VolatileCache {
		args = append(args, "--filter=cache")
		params = append(params, "cache=writeback")
	}
	return append(append(args, "file", image), params...)
}

// served says whether the VM's writable disks are served by nbdkit.
func (o *Options) served() bool { return o.VolatileCache || o.DiskFaults || o.SlowDisk > 0 }

// diskFailFile is the file whose presence makes a DiskFaults VM's disks
// fail (nbdkit's error-file).
func (o *Options) diskFailFile() string { return filepath.Join(o.StateDir, "disk-fails") }

// diskRateFile is the file that holds a DiskFaults VM's disks' rate, in
// bits a second (nbdkit's rate-file).
func (o *Options) diskRateFile() string { return filepath.Join(o.StateDir, "disk-rate") }

// cut stops the server at once: what the client wrote and did not flush
// is lost.
func (d *servedDisk) cut() {
	_ = d.cmd.Process.Kill()
	_ = d.cmd.Wait()
}

// servedSocket is the socket of disk i (0 is the boot disk) in dir.
func servedSocket(dir string, i int) string {
	return filepath.Join(dir, "disk"+strconv.Itoa(i)+".nbd")
}

// writableDrive is the QEMU -drive, named id, of writable image, disk i
// of the VM: the file, or, served, its nbdkit's socket.
func (o *Options) writableDrive(id, image string, i int) string {
	if o.served() {
		return "if=none,id=" + id + ",format=raw,file.driver=nbd,file.server.type=unix,file.server.path=" +
			optValue(servedSocket(o.StateDir, i))
	}
	return "if=none,id=" + id + ",format=raw,file=" + optValue(image)
}

// FailDisks makes the VM's disks fail every read and write with EIO
// (failing true), or work again (false). It needs Options.DiskFaults.
func (vm *VM) FailDisks(failing bool) error {
	if !vm.opts.DiskFaults {
		return errors.New("qemu: FailDisks needs Options.DiskFaults")
	}
	f := vm.opts.diskFailFile()
	if !failing {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("qemu: healing the disks: %w", err)
		}
		return nil
	}
	if err := os.WriteFile(f, nil, 0o600); err != nil {
		return fmt.Errorf("qemu: failing the disks: %w", err)
	}
	return nil
}

// ThrottleDisks limits the VM's disks to bitsPerSecond between them, as a
// drive that slows down does (a worn flash drive, a rebuilding array), or,
// with 0, lets them run at full speed again. nbdkit reads the rate at
// each request; a request already waiting for its turn finishes its wait
// at the old rate (at most its size at that rate). It needs
// Options.DiskFaults.
func (vm *VM) ThrottleDisks(bitsPerSecond int64) error {
	if !vm.opts.DiskFaults {
		return errors.New("qemu: ThrottleDisks needs Options.DiskFaults")
	}
	rate := fullRate
	if bitsPerSecond > 0 {
		rate = strconv.FormatInt(bitsPerSecond, 10)
	}
	f := vm.opts.diskRateFile()
	if err := atomicfile.Write(f, []byte(rate+"\n"), 0o600); err != nil {
		return fmt.Errorf("qemu: throttling the disks to %s bits a second: %w", rate, err)
	}
	return nil
}
