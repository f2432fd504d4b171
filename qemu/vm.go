package qemu

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/borough-os/borough/internal/poll"
)

// VM is a running machine: a QEMU process and, once the guest resets
// it, the next one (see launch).
type VM struct {
	opts    Options
	disks   []*servedDisk
	console *console
	stderr  bytes.Buffer
	started time.Time
	// cursor is where the next WaitFor starts searching the console.
	cursor int
	exited chan struct{}
	err    error

	mu sync.Mutex
	// cmd and swtpm are the machine's QEMU and TPM since its last start
	// (cmd the last QEMU that started).
	cmd, swtpm *exec.Cmd
	// launchedAt is the console's length when cmd started.
	launchedAt int
	// earlierCPU is the CPU time of the QEMU and TPM processes before
	// cmd and swtpm.
	earlierCPU time.Duration
	// killed says Kill cut the power: no start follows.
	killed bool
	// launches counts the QEMUs started.
	launches int
}

// Error is a failure of a VM, with what it printed.
type Error struct {
	Err error
	// Stderr is QEMU's standard error.
	Stderr string
	// Console is the tail of the serial console.
	Console string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.Err.Error())
	if s := strings.TrimSpace(e.Stderr); s != "" {
		fmt.Fprintf(&b, "\nQEMU stderr:\n%s", s)
	}
	fmt.Fprintf(&b, "\nserial console (tail):\n%s", e.Console)
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// consoleTail is how many console lines an Error carries.
const consoleTail = 40

// Start boots a VM. Cancelling ctx kills it.
func Start(ctx context.Context, opts Options) (*VM, error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	if err := opts.prepareVars(); err != nil {
		return nil, err
	}
	accel := Accel(ctx, opts.Logf)
	args, err := opts.args(accel)
	if err != nil {
		return nil, err
	}
	vm := &VM{opts: opts, console: newConsole(opts.Console), exited: make(chan struct{})}
	if opts.served() {
		for i, img := range append([]string{opts.Image}, opts.OtherDisks...) {
			d, err := opts.startServedDisk(ctx, img, i)
			if err != nil {
				vm.stopHelpers()
				return nil, err
			}
			vm.disks = append(vm.disks, d)
		}
	}
	opts.Logf("qemu: booting %s (%s disk, %s, %d MiB%s)", opts.Image, opts.Disk, accel, opts.MemoryMiB, tpmNote(opts.TPM))
	vm.started = time.Now()
	if err := vm.launch(ctx, args); err != nil {
		vm.stopHelpers()
		return nil, err
	}
	go vm.run(ctx, args)
	return vm, nil
}

// launch starts the machine's TPM, if it has one, and its QEMU.
//
// A headless QEMU exits when the guest resets the machine (-no-reboot),
// and run starts it again with the same disks, firmware variables and
// TPM state: a reboot is a cold start of the same machine, as on hardware
// that cuts the power in a reset. Under TCG a reset inside one QEMU
// costs seconds of CPU, up to 25 s, that hardware does not: as the
// firmware writes over memory where the previous system ran, QEMU
// invalidates the code it had translated there, page by page (in a host
// profile of such boots, page_collection_lock and page_find_alloc lead).
// What a cold start loses that a reset keeps is the RTC a guest set:
// the next start's RTC is the host's clock again, or Options.RTCBase.
func (vm *VM) launch(ctx context.Context, args []string) error {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	if vm.killed {
		return errors.New("qemu: the VM's power was cut")
	}
	if vm.opts.TPM {
		tpm, err := vm.opts.startSwtpm(ctx)
		if err != nil {
			return err
		}
		vm.swtpm = tpm
	}
	cmd := exec.CommandContext(ctx, "qemu-system-x86_64", args...)
	if vm.opts.Interactive {
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	} else {
		cmd.Stdout = vm.console
		cmd.Stderr = &vm.stderr
		// A headless VM is not the terminal's: Ctrl-C there is for the
		// program that started it, which may power it off cleanly. It
		// does not outlive that program either, however it ends.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	}
	launchedAt := len(vm.console.String())
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("qemu: starting qemu-system-x86_64 (apt-get install qemu-system-x86): %w", err)
	}
	vm.cmd, vm.launchedAt = cmd, launchedAt
	vm.launches++
	return nil
}

// run waits for QEMU to exit, and starts it again while the guest only
// reset the machine.
func (vm *VM) run(ctx context.Context, args []string) {
	for {
		vm.mu.Lock()
		cmd := vm.cmd
		vm.mu.Unlock()
		err := cmd.Wait()
		if err == nil && ctx.Err() == nil && vm.guestReset() {
			vm.opts.Logf("qemu: the guest reset the machine: starting it again (%.1f s after the first start)", vm.Since().Seconds())
			if err = vm.restart(ctx, args); err == nil {
				continue
			}
		}
		vm.err = err
		vm.stopHelpers()
		close(vm.exited)
		vm.console.close()
		return
	}
}

// poweredOff is what the guest's kernel prints as it powers the machine
// off; a QEMU that exits without it, and without Kill, saw a reset.
const poweredOff = "reboot: Power down"

// guestReset says whether the QEMU that exited did so for the guest's
// reset of the machine.
func (vm *VM) guestReset() bool {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	return !vm.killed && !vm.opts.Interactive && !strings.Contains(vm.console.String()[vm.launchedAt:], poweredOff)
}

// restart launches the machine again once its TPM, which ends with the
// QEMU it served (--terminate), has saved its state and gone.
func (vm *VM) restart(ctx context.Context, args []string) error {
	vm.mu.Lock()
	vm.earlierCPU += processStateCPU(vm.cmd)
	if vm.swtpm != nil {
		stopped := make(chan struct{})
		go func() {
			_ = vm.swtpm.Wait()
			close(stopped)
		}()
		select {
		case <-stopped:
		case <-time.After(swtpmExit):
			_ = vm.swtpm.Process.Kill()
			<-stopped
		}
		vm.earlierCPU += processStateCPU(vm.swtpm)
		vm.swtpm = nil
	}
	vm.mu.Unlock()
	return vm.launch(ctx, args)
}

// launchCount is how many QEMUs the VM has started.
func (vm *VM) launchCount() int {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	return vm.launches
}

// awaitLaunch waits until the VM has started a QEMU after its launch-th,
// and says whether it did before deadline, without stopping first.
func (vm *VM) awaitLaunch(launch int, deadline time.Time) bool {
	return poll.Until(context.Background(), time.Until(deadline), 100*time.Millisecond, func() error {
		select {
		case <-vm.exited:
			return poll.Stop(errors.New("the VM stopped"))
		default:
		}
		if vm.launchCount() == launch {
			return poll.ErrNotYet
		}
		return nil
	}) == nil
}

// dial connects to a unix socket QEMU listens on (its monitor, the
// control port), trying for up to socketWait: after a reboot, the next
// QEMU makes its sockets a moment after it runs.
func (vm *VM) dial(path string) (net.Conn, error) {
	var c net.Conn
	err := poll.Until(context.Background(), socketWait, 100*time.Millisecond, func() (err error) {
		c, err = net.DialTimeout("unix", path, socketWait)
		return err
	})
	return c, err
}

// socketWait bounds the tries to connect to one of QEMU's sockets.
const socketWait = 5 * time.Second

// swtpmExit bounds the wait for a TPM to end after its QEMU.
const swtpmExit = 10 * time.Second

func tpmNote(tpm bool) string {
	if tpm {
		return ", TPM"
	}
	return ""
}

// stopHelpers stops what the VM's QEMU used: its TPM, and its disk's
// cache, which loses what the guest did not flush, as the power going
// does.
func (vm *VM) stopHelpers() {
	for _, d := range vm.disks {
		d.cut()
	}
	vm.mu.Lock()
	defer vm.mu.Unlock()
	if vm.swtpm != nil {
		// --terminate ends swtpm when QEMU disconnects; this is for
		// a QEMU that never connected.
		_ = vm.swtpm.Process.Kill()
		_ = vm.swtpm.Wait()
	}
}

// fail wraps err with the VM's output.
func (vm *VM) fail(err error) error {
	return &Error{Err: err, Stderr: vm.stderr.String(), Console: vm.Tail(consoleTail)}
}

// Since is the time since the VM started: its first QEMU, whatever reboots
// followed.
func (vm *VM) Since() time.Duration { return time.Since(vm.started) }

// Console returns everything the serial console has printed so far.
func (vm *VM) Console() string { return vm.console.String() }

// Tail returns the last n lines of the serial console. If the console
// shows a Go panic before those lines, the lines around its message come
// first: a panic's goroutine dump alone fills a tail, and without its
// message a failure in CI cannot be read.
func (vm *VM) Tail(n int) string {
	return ConsoleTail(vm.console.String(), n)
}

// panicContext is how many lines before and after a panic's message Tail
// shows.
const panicContext = 4

// ConsoleTail is Tail of a console's text, e.g. one a command printed.
func ConsoleTail(console string, n int) string {
	lines := strings.Split(strings.TrimRight(console, "\n"), "\n")
	start := max(len(lines)-n, 0)
	var b strings.Builder
	for i, l := range lines[:start] {
		if strings.Contains(l, "panic: ") {
			from, to := max(i-panicContext, 0), min(i+panicContext+1, start)
			fmt.Fprintf(&b, "[console lines %d-%d, around a panic]\n%s\n[...]\n", from+1, to, strings.Join(lines[from:to], "\n"))
			break
		}
	}
	b.WriteString(strings.Join(lines[start:], "\n"))
	return b.String()
}

// WaitFor waits up to timeout for s to appear on the console after the
// previous WaitFor's match, and returns the time since the VM started. It
// fails with an *Error if the timeout passes or the VM stops first
// (powered off, killed, or its QEMU failed): a reboot does not stop it.
func (vm *VM) WaitFor(s string, timeout time.Duration) (time.Duration, error) {
	vm.opts.Logf("qemu: waiting up to %v for %q", timeout, s)
	t, err := vm.find(s, timeout)
	if err == nil {
		vm.opts.Logf("qemu: saw %q at %.1f s", s, t.Seconds())
	}
	return t, err
}

// WaitLine waits as WaitFor does for s, then for the end of its line (the
// console may deliver a line in pieces), and returns the whole line and
// the time s appeared.
func (vm *VM) WaitLine(s string, timeout time.Duration) (string, time.Duration, error) {
	t, err := vm.WaitFor(s, timeout)
	if err != nil {
		return "", 0, err
	}
	end := vm.cursor
	if _, err := vm.find("\n", timeout); err != nil {
		return "", 0, err
	}
	text := vm.console.String()
	start := strings.LastIndex(text[:end], "\n") + 1
	return text[start : vm.cursor-1], t, nil
}

// find moves the cursor past the next s, waiting up to timeout.
func (vm *VM) find(s string, timeout time.Duration) (time.Duration, error) {
	deadline := time.After(timeout)
	for {
		text, changed := vm.console.snapshot()
		if i := strings.Index(text[vm.cursor:], s); i >= 0 {
			vm.cursor += i + len(s)
			return vm.Since(), nil
		}
		select {
		case <-changed:
		case <-vm.exited:
			if text, _ := vm.console.snapshot(); strings.Contains(text[vm.cursor:], s) {
				continue
			}
			return 0, vm.fail(fmt.Errorf("qemu exited (%v) before the console showed %q", vm.err, s))
		case <-deadline:
			vm.showBlocked()
			return 0, vm.fail(fmt.Errorf("console did not show %q within %v", s, timeout))
		}
	}
}

// showBlocked asks the guest's kernel for the stacks of its tasks blocked
// in uninterruptible sleep (SysRq w, from the VM's keyboard), and waits
// until the console has been quiet for a moment: a boot that stopped in
// silence then says, in the tail its timeout carries, whether it waits on
// a disk that never answers or on itself (no task listed). Without a
// monitor (an interactive VM) the console stays as it was.
func (vm *VM) showBlocked() {
	if vm.opts.Interactive || vm.monitor("sendkey alt-sysrq-w") != nil {
		return
	}
	give := time.After(sysrqWait)
	for {
		_, changed := vm.console.snapshot()
		select {
		case <-changed:
		case <-time.After(sysrqQuiet):
			return
		case <-give:
			return
		case <-vm.exited:
			return
		}
	}
}

// How long showBlocked waits for the guest's answer: until the console
// is quiet for sysrqQuiet, at most sysrqWait.
const (
	sysrqQuiet = 500 * time.Millisecond
	sysrqWait  = 3 * time.Second
)

// Wait waits up to timeout (forever if timeout is 0) for QEMU to exit,
// as it does when the guest powers off.
func (vm *VM) Wait(timeout time.Duration) error {
	var deadline <-chan time.Time
	if timeout > 0 {
		vm.opts.Logf("qemu: waiting up to %v for the VM to power off", timeout)
		deadline = time.After(timeout)
	}
	select {
	case <-vm.exited:
		if vm.err != nil {
			return vm.fail(fmt.Errorf("qemu: %w", vm.err))
		}
		return nil
	case <-deadline:
		return vm.fail(fmt.Errorf("VM still running after %v", timeout))
	}
}

// PowerOff presses the VM's ACPI power button and waits up to timeout for
// it to power off.
func (vm *VM) PowerOff(timeout time.Duration) error {
	if err := vm.monitor("system_powerdown"); err != nil {
		return err
	}
	return vm.Wait(timeout)
}

// CtrlAltDel sends Ctrl-Alt-Del to the VM's keyboard.
func (vm *VM) CtrlAltDel() error {
	return vm.monitor("sendkey ctrl-alt-delete")
}

// Pause stops the VM's CPUs (the monitor's "stop"). Its clocks stop with
// them under TCG, so a paused cluster's members see no time pass and
// elect no new leader when resumed: benchmarks pause one cluster while
// they measure another on the same cores.
func (vm *VM) Pause() error {
	return vm.monitor("stop")
}

// Resume starts a paused VM's CPUs again.
func (vm *VM) Resume() error {
	return vm.monitor("cont")
}

// Kill stops QEMU at once, like pulling the plug, and waits for it; with
// Options.VolatileCache, what the guest did not flush is lost with it.
func (vm *VM) Kill() {
	vm.mu.Lock()
	vm.killed = true
	_ = vm.cmd.Process.Kill()
	vm.mu.Unlock()
	<-vm.exited
}

// monitor sends one command to QEMU's human monitor and returns once the
// monitor has taken it in (echoed it), without waiting for what it does.
func (vm *VM) monitor(command string) error {
	_, err := vm.monitorUntil(command, func(got []byte) (string, bool) {
		return "", bytes.Contains(got, []byte(command))
	})
	return err
}

// monitorPrompt is what QEMU's human monitor prints when it is ready for
// a command.
const monitorPrompt = "(qemu) "

// monitorOutput sends one command to QEMU's human monitor and returns
// what it printed in answer: everything after the command's echo, up to
// the next prompt.
func (vm *VM) monitorOutput(command string) (string, error) {
	return vm.monitorUntil(command, func(got []byte) (string, bool) {
		_, answer, ok := bytes.Cut(got, []byte(command))
		if !ok {
			return "", false
		}
		out, _, ok := bytes.Cut(answer, []byte(monitorPrompt))
		return string(out), ok
	})
}

// monitorUntil sends command to QEMU's human monitor and reads what it
// prints until done says it has what it waits for.
func (vm *VM) monitorUntil(command string, done func(got []byte) (string, bool)) (string, error) {
	c, err := vm.dial(vm.opts.monitorPath())
	if err != nil {
		return "", vm.fail(fmt.Errorf("connecting to QEMU monitor: %w", err))
	}
	defer c.Close()
	if _, err := fmt.Fprintf(c, "%s\n", command); err != nil {
		return "", vm.fail(fmt.Errorf("sending %q to QEMU monitor: %w", command, err))
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var got []byte
	buf := make([]byte, 4096)
	for {
		if out, ok := done(got); ok {
			return out, nil
		}
		n, err := c.Read(buf)
		if err != nil {
			return "", vm.fail(fmt.Errorf("QEMU monitor did not take %q: %w", command, err))
		}
		got = append(got, buf[:n]...)
	}
}

// BlockStats are I/O counts of a VM's disks since it started.
type BlockStats struct {
	ReadOps, ReadBytes, WriteOps, WriteBytes, FlushOps uint64
}

// Sub is s minus an earlier t.
func (s BlockStats) Sub(t BlockStats) BlockStats {
	return BlockStats{s.ReadOps - t.ReadOps, s.ReadBytes - t.ReadBytes, s.WriteOps - t.WriteOps,
		s.WriteBytes - t.WriteBytes, s.FlushOps - t.FlushOps}
}

// Add is s plus t.
func (s BlockStats) Add(t BlockStats) BlockStats {
	return BlockStats{s.ReadOps + t.ReadOps, s.ReadBytes + t.ReadBytes, s.WriteOps + t.WriteOps,
		s.WriteBytes + t.WriteBytes, s.FlushOps + t.FlushOps}
}

// BlockStats returns the I/O counts of all the VM's disks together, as
// QEMU counts them (the monitor's info blockstats): what the guest asked
// of its disks, whatever its file systems and device-mapper made of its
// programs' writes.
func (vm *VM) BlockStats() (BlockStats, error) {
	out, err := vm.monitorOutput("info blockstats")
	if err != nil {
		return BlockStats{}, err
	}
	return parseBlockStats(out)
}

// parseBlockStats sums info blockstats' counts over its disks: a line
// "disk0: rd_bytes=1 wr_bytes=2 ..." per disk.
func parseBlockStats(out string) (BlockStats, error) {
	var s BlockStats
	fields := map[string]*uint64{"rd_operations": &s.ReadOps, "rd_bytes": &s.ReadBytes,
		"wr_operations": &s.WriteOps, "wr_bytes": &s.WriteBytes, "flush_operations": &s.FlushOps}
	disks := 0
	for _, line := range strings.Split(out, "\n") {
		_, counts, ok := strings.Cut(strings.TrimSpace(line), ": ")
		if !ok || !strings.Contains(counts, "wr_operations=") {
			continue
		}
		disks++
		for _, kv := range strings.Fields(counts) {
			k, v, _ := strings.Cut(kv, "=")
			if p, ok := fields[k]; ok {
				n, err := strconv.ParseUint(v, 10, 64)
				if err != nil {
					return BlockStats{}, fmt.Errorf("info blockstats: %s: %w", kv, err)
				}
				*p += n
			}
		}
	}
	if disks == 0 {
		return BlockStats{}, fmt.Errorf("info blockstats named no disk: %q", out)
	}
	return s, nil
}

// console collects the serial console and wakes waiters on each write.
type console struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{}
	tee     interface{ Write([]byte) (int, error) }
}

func newConsole(tee interface{ Write([]byte) (int, error) }) *console {
	return &console{changed: make(chan struct{}), tee: tee}
}

func (c *console) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	// The guest's serial line ends lines with CRLF.
	c.buf.Write(bytes.ReplaceAll(p, []byte("\r\n"), []byte("\n")))
	if c.tee != nil {
		_, _ = c.tee.Write(p)
	}
	close(c.changed)
	c.changed = make(chan struct{})
	return len(p), nil
}

// close wakes the last waiters once QEMU has exited.
func (c *console) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	close(c.changed)
	c.changed = make(chan struct{})
}

func (c *console) String() string {
	s, _ := c.snapshot()
	return s
}

// snapshot returns the console so far and a channel closed on the next
// write.
func (c *console) snapshot() (string, <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.String(), c.changed
}
