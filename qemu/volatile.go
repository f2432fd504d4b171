package qemu

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// volatileDisk serves a raw image over NBD on a unix socket through
// nbdkit's cache filter in writeback mode: a write reaches the image only
// when the client flushes, as on a drive with a volatile write cache, and
// cut loses the rest, as a power cut does. Killing QEMU alone is a kinder
// cut: QEMU's writes sit in the host's page cache and survive it, whether
// or not the guest ever flushed them. nbdkit (a Debian package) does the
// caching: writing an NBD server here would be more code to trust than
// the property it tests.
type volatileDisk struct {
	cmd    *exec.Cmd
	socket string
}

// startVolatileDisk serves image, disk i of its VM, on a socket in dir,
// with nbdkit's cache in dir too.
func startVolatileDisk(ctx context.Context, image, dir string, i int) (*volatileDisk, error) {
	d := &volatileDisk{socket: volatileSocket(dir, i)}
	_ = os.Remove(d.socket)
	d.cmd = exec.CommandContext(ctx, "nbdkit", "--foreground", "--exit-with-parent",
		"--unix", d.socket, "--filter=cache", "file", image, "cache=writeback")
	d.cmd.Env = append(os.Environ(), "TMPDIR="+dir)
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

// cut stops the server at once: what the client wrote and did not flush
// is lost.
func (d *volatileDisk) cut() {
	_ = d.cmd.Process.Kill()
	_ = d.cmd.Wait()
}

// volatileSocket is the socket of disk i (0 is the boot disk) in dir.
func volatileSocket(dir string, i int) string {
	return filepath.Join(dir, "disk"+strconv.Itoa(i)+".nbd")
}

// writableDrive is the QEMU -drive, named id, of writable image, disk i
// of the VM: the file, or, with VolatileCache, its nbdkit's socket.
func (o *Options) writableDrive(id, image string, i int) string {
	if o.VolatileCache {
		return "if=none,id=" + id + ",format=raw,file.driver=nbd,file.server.type=unix,file.server.path=" +
			optValue(volatileSocket(o.StateDir, i))
	}
	return "if=none,id=" + id + ",format=raw,file=" + optValue(image)
}
