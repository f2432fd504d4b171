package watchdog

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The ioctls need a watchdog driver; the boot test TestUpdate arms QEMU's
// i6300esb. Here: what Arm says of devices it cannot use.
func TestArmRefuses(t *testing.T) {
	dir := t.TempDir()
	plain := filepath.Join(dir, "not-a-watchdog")
	if err := os.WriteFile(plain, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, path, err string
		is              error
	}{
		{name: "none", path: filepath.Join(dir, "watchdog"), is: ErrNone},
		{name: "a plain file", path: plain, err: "setting the watchdog's timeout to 30 s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Arm(tc.path, 30*time.Second)
			if tc.is != nil && !errors.Is(err, tc.is) || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Errorf("Arm(%s) = %v", tc.path, err)
			}
		})
	}
}
