//go:build boot

package boottest

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/borough-os/borough/internal/cmdline"
	"github.com/borough-os/borough/qemu"
)

// TestVolatileCache has the guest write a spare disk straight to the
// device, block 1 with a flush and block 0 without one, and kills the VM.
// With nbdkit's writeback cache (qemu.Options.VolatileCache), block 0 is
// lost, as on a drive with a volatile write cache that loses power; a
// plain image keeps it, because what QEMU wrote survives the kill in the
// host's page cache: the kinder cut that fault tests must not rely on.
// Block 1, flushed, survives both.
func TestVolatileCache(t *testing.T) {
	for _, tc := range []struct {
		name     string
		volatile bool
		block0   byte
	}{
		{"volatile", true, 'A'},
		{"page cache", false, 'B'},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			spare := filepath.Join(t.TempDir(), "spare.img")
			if err := os.WriteFile(spare, bytes.Repeat([]byte{'A'}, 1<<20), 0o600); err != nil {
				t.Fatal(err)
			}
			vm := boot(t, qemu.Options{
				Image: nodeImage(t, cmdline.PoweroffOnFatal), OtherDisks: []string{spare},
				VolatileCache: tc.volatile, TestParams: cmdline.TestCacheWrite + "=/dev/vdb",
			})
			expect(t, vm, bootTimeout, "borough: cache-test: test: wrote block 1 with a flush and block 0 without one")
			vm.Kill()
			b := read(t, spare)
			for _, blk := range []struct {
				at   int
				want byte
			}{{4096, 'C'}, {0, tc.block0}} {
				if got := b[blk.at : blk.at+4096]; !bytes.Equal(got, bytes.Repeat([]byte{blk.want}, 4096)) {
					t.Errorf("after the cut, the block at %d begins %q, want all %q", blk.at, got[:8], blk.want)
				}
			}
		})
	}
}
