package recovery

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/borough-os/borough/esp"
	"github.com/borough-os/borough/image"
	"github.com/borough-os/borough/internal/keyfile"
)

// TestClearKeys reads the unlock keys a node without a TPM keeps in clear
// on its ESP, from an image, and says why when it cannot: both keys or
// none.
func TestClearKeys(t *testing.T) {
	luk, cuk := bytes.Repeat([]byte{1}, keyfile.KeySize), bytes.Repeat([]byte{2}, keyfile.KeySize)
	clear := func(k []byte) []byte {
		b, err := keyfile.File{Clear: k}.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	sealed, err := keyfile.File{Sealed: []byte(`{"sealed":"by a TPM"}`)}.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		files map[esp.File][]byte
		want  string // "" for both keys
	}{
		{"both in clear", map[esp.File][]byte{esp.SealedLocalKey: clear(luk), esp.ClusterKeyEscrow: clear(cuk)}, ""},
		{"no keys", nil, "holds no unlock keys"},
		{"the cluster keeps the CUK", map[esp.File][]byte{esp.SealedLocalKey: clear(luk)}, "its owner opens the disk with --owner-key"},
		{"the LUK sealed", map[esp.File][]byte{esp.SealedLocalKey: sealed, esp.ClusterKeyEscrow: clear(cuk)}, "unseal it on the node's own machine"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			img := filepath.Join(t.TempDir(), "disk.img")
			if err := image.Build(img, image.Params{BootBinary: []byte("boot"), Size: image.DefaultSize}); err != nil {
				t.Fatal(err)
			}
			for f, b := range tc.files {
				if err := image.WriteESPFile(img, f, b); err != nil {
					t.Fatal(err)
				}
			}
			keys, err := ClearKeys(img)
			switch {
			case tc.want == "" && (err != nil || !bytes.Equal(keys[LUKFile], luk) || !bytes.Equal(keys[CUKFile], cuk)):
				t.Errorf("ClearKeys = %x, %v; want both keys", keys, err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || len(keys) != 0):
				t.Errorf("ClearKeys = %x, %v; want no keys and an error saying %q", keys, err, tc.want)
			}
		})
	}
}
