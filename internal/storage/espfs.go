package storage

import (
	"fmt"
	"os"

	"github.com/borough-os/borough/esp"
	"github.com/borough-os/borough/internal/atomicfile"
)

// ESPRoot is where the node mounts the ESP.
const ESPRoot = "/esp"

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
