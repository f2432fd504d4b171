package storage

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/borough-os/borough/esp"
	"github.com/borough-os/borough/internal/atomicfile"
)

// ESPRoot is where the node mounts the ESP.
const ESPRoot = "/esp"

// mountESP mounts the ESP vfat, without devices, set-uid or executables.
func mountESP(dev string) error {
	if err := os.MkdirAll(ESPRoot, 0o700); err != nil {
		return err
	}
	err := unix.Mount(dev, ESPRoot, "vfat", unix.MS_NODEV|unix.MS_NOSUID|unix.MS_NOEXEC, "umask=0077,shortname=mixed")
	if err != nil {
		return &os.PathError{Op: "mount vfat " + dev, Path: ESPRoot, Err: err}
	}
	return nil
}

// readESP reads f from the ESP mounted at root; a missing file is
// os.ErrNotExist.
func readESP(root string, f esp.File) ([]byte, error) {
	return os.ReadFile(f.In(root))
}

// writeESP replaces f on the ESP mounted at root, atomically and durably.
func writeESP(root string, f esp.File, data []byte) error {
	if err := atomicfile.Write(f.In(root), data, 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", f, err)
	}
	return nil
}
