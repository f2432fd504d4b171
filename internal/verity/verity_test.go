package verity

import (
	"bytes"
	"encoding/hex"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestVeritysetup builds trees of images of several sizes and checks
// them against veritysetup's, tree bytes and root hash.
func TestVeritysetup(t *testing.T) {
	tool, err := exec.LookPath("veritysetup")
	if err != nil {
		t.Fatal("veritysetup (Debian's cryptsetup-bin) is needed to check the tree: ", err)
	}
	salt := bytes.Repeat([]byte{0x5a}, 32)
	rng := rand.New(rand.NewPCG(1, 2))
	for _, size := range []int{1, BlockSize, 2 * BlockSize, 128 * BlockSize, 129*BlockSize - 7, 3000 * BlockSize, 128*128*BlockSize + 1} {
		data := make([]byte, size)
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		image, d := BuildSalted(data, salt)
		dir := t.TempDir()
		dataFile, hashFile := filepath.Join(dir, "data"), filepath.Join(dir, "hash")
		if err := os.WriteFile(dataFile, image[:d.DataBlocks*BlockSize], 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(tool, "format", "--no-superblock", "--hash", Algorithm, "--salt", hex.EncodeToString(salt),
			"--data-block-size", "4096", "--hash-block-size", "4096", dataFile, hashFile).CombinedOutput()
		if err != nil {
			t.Fatalf("veritysetup format: %v\n%s", err, out)
		}
		m := regexp.MustCompile(`Root hash:\s+([0-9a-f]+)`).FindSubmatch(out)
		if m == nil {
			t.Fatalf("veritysetup printed no root hash:\n%s", out)
		}
		if got := hex.EncodeToString(d.Root); got != string(m[1]) {
			t.Errorf("%d bytes: root %s, veritysetup's %s", size, got, m[1])
		}
		want, err := os.ReadFile(hashFile)
		if err != nil {
			t.Fatal(err)
		}
		if tree := image[d.DataBlocks*BlockSize:]; !bytes.Equal(tree, want) {
			t.Errorf("%d bytes: a tree of %d bytes, veritysetup's of %d, or they differ", size, len(tree), len(want))
		}
	}
}

func TestBuildDerivesSalt(t *testing.T) {
	a1, d1 := Build([]byte("payload one"))
	a2, d2 := Build([]byte("payload one"))
	_, d3 := Build([]byte("payload two"))
	if !bytes.Equal(a1, a2) || d1.String() != d2.String() {
		t.Error("one image made two trees")
	}
	if bytes.Equal(d1.Salt, d3.Salt) || bytes.Equal(d1.Root, d3.Root) {
		t.Error("two images share a salt or a root")
	}
}

func TestDescriptor(t *testing.T) {
	_, d := Build(bytes.Repeat([]byte{1}, 3*BlockSize))
	got, err := Parse(d.String())
	if err != nil || got.String() != d.String() {
		t.Fatalf("Parse(%q) = %v, %v", d, got, err)
	}
	if p := d.Params("/dev/loop0"); p != "1 /dev/loop0 /dev/loop0 4096 4096 3 3 sha512 "+hex.EncodeToString(d.Root)+" "+hex.EncodeToString(d.Salt) {
		t.Errorf("Params = %q", p)
	}
	root := hex.EncodeToString(d.Root)
	for _, tc := range []struct{ in, err string }{
		{"", "want root hash, salt and data blocks"},
		{"zz 00 1", "root hash is not 64 bytes"},
		{root[:10] + " 00 1", "root hash is not 64 bytes"},
		{root + " xy 1", "salt is not hex"},
		{root + " 00 0", "data blocks is not a positive number"},
		{root + " 00 -3", "data blocks is not a positive number"},
	} {
		if _, err := Parse(tc.in); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("Parse(%q) = %v; want %q", tc.in, err, tc.err)
		}
	}
}
