package qemu

import (
	"bufio"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/borough-os/borough/internal/cmdline"
)

// The control port (Options.Control) is a virtio-serial port named
// cmdline.TestControl: a test build of the node reads commands from it,
// one per line (node/testcontrol.go). It is how a test reaches into a
// running guest without a network or a guest agent, for faults only the
// guest can make, such as a jump of its clock.

func (o *Options) controlPath() string { return filepath.Join(o.StateDir, "control.sock") }

// controlArgs are QEMU's arguments for the control port: a virtio-serial
// port whose host end is a unix socket QEMU listens on.
func (o *Options) controlArgs() []string {
	return []string{"-device", "virtio-serial-pci,id=control",
		"-chardev", "socket,id=controlchr,server=on,wait=off,path=" + optValue(o.controlPath()),
		"-device", "virtserialport,bus=control.0,chardev=controlchr,name=" + cmdline.TestControl}
}

// Control sends command to the guest's control port and returns the
// line the guest answers, waiting up to timeout for it: the guest reads
// the port only while its host end is open, so the connection stays open
// until the answer. The host end is the QEMU's: if the guest resets the
// machine first, the connection ends with that QEMU, and the command
// goes again, within timeout, to the system the next one boots.
func (vm *VM) Control(command string, timeout time.Duration) (string, error) {
	if !vm.opts.Control {
		return "", fmt.Errorf("qemu: %s has no control port (Options.Control)", vm.opts.Image)
	}
	deadline := time.Now().Add(timeout)
	for {
		launch := vm.launchCount()
		answer, err := vm.control(command, deadline)
		if err == nil {
			return answer, nil
		}
		if !vm.awaitLaunch(launch, deadline) {
			return "", vm.fail(err)
		}
		vm.opts.Logf("qemu: the control port closed as the guest reset the machine: sending %q again", command)
	}
}

// control sends command once, on a connection to the port's host end,
// and reads the answer until deadline.
func (vm *VM) control(command string, deadline time.Time) (string, error) {
	c, err := vm.dial(vm.opts.controlPath())
	if err != nil {
		return "", fmt.Errorf("connecting to the control port: %w", err)
	}
	defer c.Close()
	_ = c.SetDeadline(deadline)
	if _, err := fmt.Fprintf(c, "%s\n", command); err != nil {
		return "", fmt.Errorf("sending %q to the control port: %w", command, err)
	}
	answer, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("no answer to %q on the control port: %w", command, err)
	}
	return strings.TrimSuffix(answer, "\n"), nil
}
