//go:build boot

package boottest

import (
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/borough-os/borough/internal/cmdline"
	"github.com/borough-os/borough/qemu"
)

// TestQEMUUntil runs `borough qemu --until` as a user's CI would: once
// the node runs, the command after -- runs and its exit status is
// borough's; a line that never comes fails with the console's tail.
func TestQEMUUntil(t *testing.T) {
	bin := filepath.Join(outDir(t), "bin", "borough")
	for _, tc := range []struct {
		name, until, timeout string
		command              []string
		wantCode             int
		wantOut              string
	}{
		{"the node runs, then the command", "borough: node running", "3m", []string{"sh", "-c", "echo ran-after-boot; exit 7"}, 7, "ran-after-boot"},
		{"a line that never comes", "borough: no such line", "15s", nil, 1, "serial console (tail):"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			args := []string{"qemu", nodeImage(t, cmdline.PoweroffOnFatal), "--net", "--until", tc.until, "--timeout", tc.timeout}
			if tc.command != nil {
				args = append(append(args, "--"), tc.command...)
			}
			out, err := exec.Command(bin, args...).CombinedOutput()
			code := 0
			var exit *exec.ExitError
			if errors.As(err, &exit) {
				code = exit.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tc.wantCode || !strings.Contains(string(out), tc.wantOut) {
				t.Errorf("borough %s exited %d, want %d with %q in its output:\n%s", strings.Join(args, " "), code, tc.wantCode, tc.wantOut, qemu.ConsoleTail(string(out), 30))
			}
		})
	}
}

// TestCIExample runs examples/ci/boot-and-query.sh, the script the
// example GitHub Actions workflow runs, on the release image.
func TestCIExample(t *testing.T) {
	t.Parallel()
	port := freePort(t)
	cmd := exec.Command("../examples/ci/boot-and-query.sh", filepath.Join(outDir(t), "borough.img"))
	cmd.Env = append(cmd.Environ(), "BOROUGH="+filepath.Join(outDir(t), "bin", "borough"), fmt.Sprintf("PORT=%d", port))
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "ci: put and got greeting through the node") {
		t.Errorf("examples/ci/boot-and-query.sh: %v\n%s", err, qemu.ConsoleTail(string(out), 40))
	}
}
