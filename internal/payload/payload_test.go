package payload

import (
	"bytes"
	"os"
	"path/filepath"
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

func TestUnpack(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "etc"), 0o755)
	b := archive(t,
		cpio.StaticFile("bin/node", "#!node", 0o755),
		cpio.StaticFile("etc/mke2fs.conf", "[defaults]", 0o644),
		cpio.Symlink("lib64/ld.so", "/lib/x86_64-linux-gnu/ld.so"),
	)
	if err := Unpack(b, root); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(root, NodeBinary))
	if err != nil || st.Mode().Perm()&0o100 == 0 {
		t.Errorf("node binary: %v, mode %v", err, st)
	}
	if got, _ := os.ReadFile(filepath.Join(root, "etc/mke2fs.conf")); string(got) != "[defaults]" {
		t.Errorf("etc/mke2fs.conf = %q", got)
	}
	if target, err := os.Readlink(filepath.Join(root, "lib64/ld.so")); err != nil || target != "/lib/x86_64-linux-gnu/ld.so" {
		t.Errorf("symlink = %q, %v", target, err)
	}
	for name, bad := range map[string][]byte{"garbage": []byte("not zstd"), "truncated": b[:len(b)/2]} {
		if err := Unpack(bad, t.TempDir()); err == nil {
			t.Errorf("Unpack of %s succeeded", name)
		}
	}
}
