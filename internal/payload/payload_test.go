package payload

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

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
