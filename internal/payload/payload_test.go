package payload

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/u-root/mkuimage/cpio"
)

func archive(t *testing.T, records ...cpio.Record) []byte {
	t.Helper()
	var raw bytes.Buffer
	w := cpio.Newc.Writer(&raw)
	if err := cpio.WriteRecordsAndDirs(w, records); err != nil {
		t.Fatal(err)
	}
	if err := cpio.WriteTrailer(w); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	enc, _ := zstd.NewWriter(&out)
	enc.Write(raw.Bytes())
	enc.Close()
	return out.Bytes()
}

func TestRecords(t *testing.T) {
	b := archive(t,
		cpio.StaticFile("init", "#!init", 0o755),
		cpio.StaticFile(Hash, "abc\n", 0o644),
	)
	records, err := Records(b)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range records {
		names = append(names, r.Name)
	}
	if !slices.Contains(names, Hash) || !slices.Contains(names, "init") {
		t.Errorf("records %v; want init and %s", names, Hash)
	}
	for name, bad := range map[string][]byte{"garbage": []byte("not zstd"), "truncated": b[:len(b)/2]} {
		if _, err := Records(bad); err == nil {
			t.Errorf("Records of %s succeeded", name)
		}
	}
}

// TestLink links a payload tree into a root that shares some of its
// directories, as the initramfs shares etc and data with the payload.
func TestLink(t *testing.T) {
	root, tree := t.TempDir(), t.TempDir()
	for _, d := range []string{"etc/borough", "data"} {
		os.MkdirAll(filepath.Join(root, d), 0o755)
	}
	for _, d := range []string{"bin", "etc", "data", "lib/x86_64-linux-gnu", "lib64"} {
		os.MkdirAll(filepath.Join(tree, d), 0o755)
	}
	os.WriteFile(filepath.Join(tree, NodeBinary), []byte("node"), 0o755)
	os.WriteFile(filepath.Join(tree, "etc/mke2fs.conf"), []byte("[defaults]"), 0o644)
	os.Symlink("../lib/x86_64-linux-gnu/ld.so", filepath.Join(tree, "lib64/ld.so"))
	if err := Link(root, tree); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{NodeBinary: "node", "etc/mke2fs.conf": "[defaults]"} {
		if got, err := os.ReadFile(filepath.Join(root, name)); err != nil || string(got) != want {
			t.Errorf("%s = %q, %v; want %q", name, got, err, want)
		}
	}
	for name, want := range map[string]string{"bin": filepath.Join(tree, "bin"), "lib64": filepath.Join(tree, "lib64"),
		"etc/mke2fs.conf": filepath.Join(tree, "etc/mke2fs.conf")} {
		if got, err := os.Readlink(filepath.Join(root, name)); err != nil || got != want {
			t.Errorf("%s links to %q, %v; want %q", name, got, err, want)
		}
	}
	if st, err := os.Lstat(filepath.Join(root, "etc")); err != nil || !st.IsDir() {
		t.Errorf("the initramfs's etc was replaced: %v, %v", st, err)
	}

	clash := t.TempDir()
	os.WriteFile(filepath.Join(clash, "data"), []byte("a file"), 0o644)
	if err := Link(root, clash); err == nil || !strings.Contains(err.Error(), "would replace the initramfs's") {
		t.Errorf("Link of a file over a directory = %v", err)
	}
}
