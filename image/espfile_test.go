package image

import (
	"bytes"
	"crypto/rand"
	"path/filepath"
	"testing"

	"github.com/borough-os/borough/esp"
)

// TestReadESPFile reads files from an image's ESP whole and no more: a
// boot binary of a size that ends inside a cluster came back with the
// rest of the cluster after it.
func TestReadESPFile(t *testing.T) {
	for _, size := range []int{560, 7<<20 + 123} {
		boot := make([]byte, size)
		rand.Read(boot)
		img := filepath.Join(t.TempDir(), "disk.img")
		if err := Build(img, Params{BootBinary: boot, Size: DefaultSize}); err != nil {
			t.Fatal(err)
		}
		got, err := ReadESPFile(img, esp.BootBinary)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, boot) {
			t.Errorf("a file of %d bytes read back as %d bytes, equal in its first %d: %v", size, len(got),
				min(len(got), size), bytes.Equal(got[:min(len(got), size)], boot[:min(len(got), size)]))
		}
	}
}
