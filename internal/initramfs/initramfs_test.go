package initramfs

import (
	"bytes"
	"debug/elf"
	"io"
	"path"
	"strings"
	"testing"

	"github.com/u-root/mkuimage/cpio"

	"github.com/borough-os/borough/internal/uki"
)

// readArchive decompresses and parses an initramfs into name -> record,
// as the node reads an update's (uki.InitrdRecords).
func readArchive(t *testing.T, compressed []byte) map[string]cpio.Record {
	t.Helper()
	recs, err := uki.InitrdRecords(compressed)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]cpio.Record{}
	for _, r := range recs {
		m[r.Name] = r
	}
	return m
}

const (
	modeType    = 0o170000
	modeRegular = 0o100000
	modeSymlink = 0o120000
	modeCharDev = 0o020000
)

// resolve follows symlinks inside the archive, as the guest's kernel would.
func resolve(t *testing.T, files map[string]cpio.Record, name string) (cpio.Record, bool) {
	for range 10 {
		r, ok := files[name]
		if !ok {
			return r, false
		}
		if r.Mode&modeType != modeSymlink {
			return r, true
		}
		target, _ := io.ReadAll(io.NewSectionReader(r, 0, int64(r.FileSize)))
		if path.IsAbs(string(target)) {
			name = strings.TrimPrefix(string(target), "/")
		} else {
			name = path.Join(path.Dir(name), string(target))
		}
		// Directories in the path may be symlinks too (lib64 -> usr/lib64).
		name = resolveDirs(files, name)
	}
	t.Fatalf("symlink loop at %s", name)
	return cpio.Record{}, false
}

func resolveDirs(files map[string]cpio.Record, name string) string {
	parts := strings.Split(name, "/")
	for i := 1; i < len(parts); i++ {
		dir := strings.Join(parts[:i], "/")
		if r, ok := files[dir]; ok && r.Mode&modeType == modeSymlink {
			target, _ := io.ReadAll(io.NewSectionReader(r, 0, int64(r.FileSize)))
			return resolveDirs(files, path.Join(strings.TrimPrefix(path.Join(path.Dir(dir), string(target)), "/"), strings.Join(parts[i:], "/")))
		}
	}
	return name
}

// libDirs are where the guest's dynamic loader looks, having no ld.so.cache.
var libDirs = []string{"lib/x86_64-linux-gnu", "usr/lib/x86_64-linux-gnu", "lib64", "lib", "usr/lib"}

func TestBuild(t *testing.T) {
	p := Params{Init: "/bin/true", Files: NodeFiles}
	var out bytes.Buffer
	if err := Build(&out, p); err != nil {
		t.Fatal(err)
	}
	files := readArchive(t, out.Bytes())

	if r, ok := files["init"]; !ok || r.Mode&modeType != modeRegular || r.Mode&0o111 == 0 {
		t.Errorf("init missing or not an executable file: %v", r.Info)
	}
	if r, ok := files["dev/console"]; !ok || r.Mode&modeType != modeCharDev || r.Rmajor != 5 || r.Rminor != 1 {
		t.Errorf("dev/console missing or not char 5:1: %v", r.Info)
	}
	if _, ok := files["etc/mke2fs.conf"]; !ok {
		t.Error("etc/mke2fs.conf missing")
	}
	for _, prog := range []string{"sbin/mke2fs", "sbin/e2fsck"} {
		t.Run(prog, func(t *testing.T) {
			r, ok := resolve(t, files, prog)
			if !ok {
				t.Fatalf("%s missing", prog)
			}
			f, err := elf.NewFile(r)
			if err != nil {
				t.Fatalf("%s is not ELF: %v", prog, err)
			}
			needed, err := f.ImportedLibraries()
			if err != nil {
				t.Fatal(err)
			}
			var interp *elf.Prog
			for _, p := range f.Progs {
				if p.Type == elf.PT_INTERP {
					interp = p
				}
			}
			if interp == nil {
				t.Fatalf("%s has no PT_INTERP", prog)
			}
			loader, _ := io.ReadAll(interp.Open())
			if _, ok := resolve(t, files, strings.TrimPrefix(strings.TrimRight(string(loader), "\x00"), "/")); !ok {
				t.Errorf("dynamic loader %q missing", loader)
			}
			for _, lib := range needed {
				found := false
				for _, dir := range libDirs {
					if _, ok := resolve(t, files, path.Join(dir, lib)); ok {
						found = true
						break
					}
				}
				if !found {
					t.Errorf("%s needs %s, which is not in the initramfs", prog, lib)
				}
			}
		})
	}

	var again bytes.Buffer
	if err := Build(&again, p); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), again.Bytes()) {
		t.Error("two builds of the same initramfs differ")
	}
}

func TestBuildMissingFile(t *testing.T) {
	err := Build(io.Discard, Params{Init: "/bin/true", Files: []string{"/no/such/tool"}})
	if err == nil || !strings.Contains(err.Error(), "/no/such/tool") {
		t.Errorf("Build = %v, want an error naming /no/such/tool", err)
	}
}
