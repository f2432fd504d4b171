package tpm

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// A TPM the firmware describes, and the kernel has no device for.
//
// The firmware describes a TPM 2.0 in its ACPI table TPM2, and the
// kernel makes /dev/tpm0 once its driver (tpm_tis or tpm_crb) has probed
// the device (ACPI ID MSFT0101). A probe fails if the TPM answers a
// command late (Linux gives TPM2_GetCapability 750 ms), and the kernel
// does not try a failed driver again by itself. Without the device the
// node would take the machine for one without a TPM, and a first boot
// would keep its keys in clear for the life of its data volume: a TPM
// that was slow once must not cost that. So Open asks the kernel to
// probe again (the bus's drivers_probe), a few times, and a TPM the
// firmware describes but no probe brings up is an error (ErrNotProbed),
// never "no TPM": the node opens no data volume then, unless its
// storage policy disables the TPM.

// ErrNotProbed is returned by Open when the firmware describes a TPM 2.0
// but the kernel's driver did not take it, however often asked.
var ErrNotProbed = errors.New("the firmware describes a TPM 2.0 (ACPI table TPM2), but the kernel made no TPM device")

// probeTries bounds the probes Open asks for, probeWait apart. A count,
// not a deadline (internal/poll): each write to drivers_probe returns
// only once the kernel's probe has ended, which for a TPM that answers
// late takes as long as the driver waits, so a deadline would cut the
// probes short exactly when the TPM is slow.
const (
	probeTries = 3
	probeWait  = time.Second
)

// tpmACPIID is the ACPI hardware ID of a TPM 2.0, on a TIS or CRB
// interface alike.
const tpmACPIID = "MSFT0101"

// machine is where the kernel shows its devices: sysfs, and the device
// nodes to open, in order of preference; wait is the pause between
// probes.
type machine struct {
	sys   string
	nodes []string
	wait  time.Duration
}

// thisMachine is the running kernel's. /dev/tpm0, the raw device, comes
// first: exclusive, with only the TPM's few transient slots. The node is
// the TPM's one user in user space and flushes every object and session
// it loads, under its lock, so it needs neither the sharing nor the
// cleanup of /dev/tpmrm0, the kernel's resource manager, which saves and
// flushes every loaded object and session of the process after each
// command and loads them again before the next: under TCG, an unseal
// took 215 to 233 ms through it and 62 to 70 ms on the raw device
// (docs/decisions.md, "The raw TPM device"). The kernel reads the TPM's
// random numbers too, which takes no slot; a kernel with TPM sessions of
// its own (CONFIG_TCG_TPM2_HMAC, Linux 6.10 on) would take some.
var thisMachine = machine{sys: "/sys", nodes: []string{"/dev/tpm0", "/dev/tpmrm0"}, wait: probeWait}

// open opens the machine's TPM, asking the kernel to probe a TPM the
// firmware describes again if it has no device for it.
func (m machine) open() (*TPM, error) {
	t, err := open(m.nodes)
	if !errors.Is(err, ErrNoTPM) || !m.described() {
		return t, err
	}
	var unbound []string
	for try := 0; try < probeTries; try++ {
		if try > 0 {
			time.Sleep(m.wait)
		}
		if unbound, err = m.probe(); err != nil {
			return nil, err
		}
		if t, err = open(m.nodes); err == nil {
			t.probes = try + 1
		}
		if !errors.Is(err, ErrNoTPM) {
			return t, err
		}
	}
	devices := "none: the kernel made no device of it either"
	if len(unbound) > 0 {
		devices = strings.Join(unbound, ", ")
	}
	return nil, fmt.Errorf("%w, %d probes over (devices without a driver: %s; the kernel's log says why, under tpm_tis or tpm_crb)",
		ErrNotProbed, probeTries, devices)
}

// described says whether the firmware's ACPI tables describe a TPM 2.0.
func (m machine) described() bool {
	_, err := os.Stat(filepath.Join(m.sys, "firmware/acpi/tables/TPM2"))
	return err == nil
}

// probe asks the kernel to probe again every TPM device on the platform
// and ACPI buses that no driver took, and returns their buses and names.
func (m machine) probe() ([]string, error) {
	var unbound []string
	for _, bus := range []string{"platform", "acpi"} {
		devices, err := filepath.Glob(filepath.Join(m.sys, "bus", bus, "devices", tpmACPIID+":*"))
		if err != nil {
			return nil, err
		}
		for _, dev := range devices {
			if _, err := os.Lstat(filepath.Join(dev, "driver")); !errors.Is(err, fs.ErrNotExist) {
				continue
			}
			name := filepath.Base(dev)
			unbound = append(unbound, bus+"/"+name)
			// A driver that refuses the device (tpm_crb for a TIS
			// one) makes the write fail; the device node says
			// whether one took it.
			_ = os.WriteFile(filepath.Join(m.sys, "bus", bus, "drivers_probe"), []byte(name), 0)
		}
	}
	return unbound, nil
}

// Probes is how many times Open asked the kernel to probe the TPM again
// before it had a device: 0 where the kernel's own probe took it.
func (t *TPM) Probes() int { return t.probes }
