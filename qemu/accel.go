package qemu

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// AccelEnv overrides the accelerator choice: "kvm" or "tcg".
const AccelEnv = "BOROUGH_QEMU_ACCEL"

// probeTimeout bounds the KVM probe; a working KVM answers in well under
// a second.
const probeTimeout = 5 * time.Second

var (
	accelOnce   sync.Once
	accelChoice string
)

// Accel returns "kvm" if KVM has been seen to run a guest on this machine,
// else "tcg". On some machines /dev/kvm exists but QEMU asserts or spins
// with it, so its presence proves nothing: the probe boots a 64 KiB
// firmware whose only instruction writes to QEMU's isa-debug-exit port,
// and KVM counts as working if QEMU then exits with the expected status.
// The verdict is cached per kernel and QEMU build in the user's cache
// directory, and once per process.
func Accel(ctx context.Context, logf func(string, ...any)) string {
	accelOnce.Do(func() {
		if v := os.Getenv(AccelEnv); v == "kvm" || v == "tcg" {
			accelChoice = v
			return
		}
		accelChoice = cachedProbe(ctx, logf)
	})
	return accelChoice
}

func cachedProbe(ctx context.Context, logf func(string, ...any)) string {
	if _, err := os.Stat("/dev/kvm"); err != nil {
		return "tcg"
	}
	key := probeKey()
	cache := ""
	if dir, err := os.UserCacheDir(); err == nil {
		cache = filepath.Join(dir, "borough", "kvm-probe")
		if b, err := os.ReadFile(cache); err == nil {
			if k, v, ok := strings.Cut(strings.TrimSpace(string(b)), " "); ok && k == key {
				return v
			}
		}
	}
	verdict := "tcg"
	if err := probe(ctx, "kvm"); err != nil {
		logf("qemu: KVM does not work here (%v); using TCG", err)
	} else {
		verdict = "kvm"
	}
	if cache != "" && os.MkdirAll(filepath.Dir(cache), 0o755) == nil {
		_ = os.WriteFile(cache, []byte(key+" "+verdict+"\n"), 0o644)
	}
	return verdict
}

// probeKey identifies the host kernel and QEMU build.
func probeKey() string {
	release, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	key := strings.TrimSpace(string(release))
	if path, err := exec.LookPath("qemu-system-x86_64"); err == nil {
		if st, err := os.Stat(path); err == nil {
			key += fmt.Sprintf("/%d-%d", st.Size(), st.ModTime().Unix())
		}
	}
	return strings.ReplaceAll(key, " ", "_")
}

// probeExit is the status QEMU exits with when the probe firmware writes
// 0x31 to isa-debug-exit: (0x31 << 1) | 1.
const probeExit = 99

// probe runs the probe firmware with the accelerator accel.
func probe(ctx context.Context, accel string) error {
	// Real-mode code at the reset vector (the last 16 bytes of the
	// firmware): mov al, 0x31; out 0xf4, al; hlt; jmp $.
	bios := make([]byte, 64<<10)
	copy(bios[len(bios)-16:], []byte{0xB0, 0x31, 0xE6, 0xF4, 0xF4, 0xEB, 0xFE})
	f, err := os.CreateTemp("", "borough-kvm-probe")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(bios); err != nil {
		f.Close()
		return err
	}
	f.Close()
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	// The same machine and CPU model as real VMs: KVM can fail on the
	// MSRs that -cpu max sets up before running a single instruction.
	cmd := exec.CommandContext(ctx, "qemu-system-x86_64", "-machine", "q35", "-accel", accel,
		"-cpu", "max", "-nodefaults", "-display", "none", "-bios", f.Name(),
		"-device", "isa-debug-exit,iobase=0xf4,iosize=0x01")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("no answer within %v", probeTimeout)
	case errors.As(err, &exit) && exit.ExitCode() == probeExit:
		return nil
	default:
		first, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
		return fmt.Errorf("%v: %s", err, first)
	}
}
