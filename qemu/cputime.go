package qemu

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// userHZ is the unit of /proc/PID/stat's CPU times: USER_HZ, fixed at 100
// by the kernel's ABI on x86, whatever the kernel's own tick.
const userHZ = 100

// CPUTime is the host CPU time the VM has used since it started, user and
// system, of QEMU and of its TPM emulator if it has one: what a
// benchmark's cores spent on the guest, whatever the guest spent it on.
// Under TCG that includes emulating the guest's instructions, so it
// counts a guest's CPU work and its idle wake-ups alike.
func (vm *VM) CPUTime() (time.Duration, error) {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	total, err := processCPU(vm.cmd.Process.Pid)
	if err != nil {
		return 0, err
	}
	total += vm.earlierCPU
	if vm.swtpm != nil {
		tpm, err := processCPU(vm.swtpm.Process.Pid)
		if err != nil {
			return 0, err
		}
		total += tpm
	}
	return total, nil
}

// processCPU is the user and system CPU time of process pid, all its
// threads, from /proc.
func processCPU(pid int) (time.Duration, error) {
	path := fmt.Sprintf("/proc/%d/stat", pid)
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("the CPU time of a VM: %w", err)
	}
	ticks, err := parseStatCPU(string(b))
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}

// parseStatCPU is utime plus stime, in ticks, of a /proc/PID/stat line:
// the 14th and 15th fields, counted after the command's name, which is in
// parentheses and may hold spaces.
func parseStatCPU(stat string) (uint64, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("no command name in %q", stat)
	}
	// After the name come field 3 (state) onwards.
	fields := strings.Fields(stat[i+1:])
	if len(fields) < 13 {
		return 0, fmt.Errorf("%d fields after the command name, want at least 13", len(fields))
	}
	var sum uint64
	for _, f := range fields[11:13] {
		n, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("CPU time %q: %w", f, err)
		}
		sum += n
	}
	return sum, nil
}

// processStateCPU is the user and system CPU time of cmd's process, which
// has exited (Wait returned).
func processStateCPU(cmd *exec.Cmd) time.Duration {
	return cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
}
