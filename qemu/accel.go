package qemu

import (
	"bytes"
	"context"
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

// probeTimeout bounds the KVM probe; OVMF under a working KVM reaches its
// boot manager in about a second.
const probeTimeout = 20 * time.Second

var (
	accelOnce   sync.Once
	accelChoice string
)

// Accel returns "kvm" if KVM has been seen to run a guest on this machine,
// else "tcg". On some machines /dev/kvm exists but QEMU asserts or spins
// with it, so its presence proves nothing: the probe boots OVMF, the
// firmware every VM runs, and KVM counts as working once OVMF's boot
// manager prints its first line.
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
	// The probe's own version: a verdict of an older probe is not kept.
	key := "ovmf/" + strings.TrimSpace(string(release))
	if path, err := exec.LookPath("qemu-system-x86_64"); err == nil {
		if st, err := os.Stat(path); err == nil {
			key += fmt.Sprintf("/%d-%d", st.Size(), st.ModTime().Unix())
		}
	}
	return strings.ReplaceAll(key, " ", "_")
}

// probeSign is what OVMF prints on the serial console once its boot
// manager runs: proof that the firmware itself, not just one
// instruction, works under the accelerator.
const probeSign = "BdsDxe"

// probe boots the VMs' own firmware (OVMF, no disks) with the accelerator
// accel and waits for its boot manager's first line. A one-instruction
// firmware is not enough: on some hosts KVM runs that, then stops OVMF
// with "KVM internal error".
func probe(ctx context.Context, accel string) error {
	vars, err := os.CreateTemp("", "borough-kvm-probe")
	if err != nil {
		return err
	}
	defer os.Remove(vars.Name())
	b, err := os.ReadFile(ovmfVars)
	if err == nil {
		_, err = vars.Write(b)
	}
	vars.Close()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "qemu-system-x86_64", "-machine", "q35", "-accel", accel,
		"-cpu", "max", "-m", "256", "-nodefaults", "-display", "none", "-no-user-config",
		"-drive", "if=pflash,format=raw,unit=0,readonly=on,file="+ovmfCode,
		"-drive", "if=pflash,format=raw,unit=1,file="+vars.Name(), "-serial", "stdio")
	out := &signWriter{sign: []byte(probeSign), seen: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	select {
	case <-out.seen:
		return nil
	case <-ctx.Done():
		first, _, _ := strings.Cut(strings.TrimSpace(out.String()), "\n")
		return fmt.Errorf("OVMF did not reach its boot manager within %v: %s", probeTimeout, first)
	}
}

// signWriter collects output and closes seen once sign appears in it.
type signWriter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	sign []byte
	seen chan struct{}
	done bool
}

func (w *signWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if !w.done && bytes.Contains(w.buf.Bytes(), w.sign) {
		w.done = true
		close(w.seen)
	}
	return len(p), nil
}

func (w *signWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}
