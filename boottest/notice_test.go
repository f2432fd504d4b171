//go:build boot

package boottest

import (
	"debug/buildinfo"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/u-root/mkuimage/cpio"

	"github.com/borough-os/borough/internal/payload"
	"github.com/borough-os/borough/internal/uki"
)

// TestNotice checks that NOTICE names everything the release image ships
// that Borough did not write: every file of the node payload and the
// initramfs but Borough's own programs, the boot binary's kernel and
// stub, and every Go module compiled into the node and init.
func TestNotice(t *testing.T) {
	b, err := os.ReadFile("../NOTICE")
	if err != nil {
		t.Fatal(err)
	}
	notice := string(b)
	ours := map[string]bool{payload.NodeBinary: true, "init": true, payload.Hash: true, payload.Verity: true}
	for archive, names := range map[string][]string{
		"node.squashfs":      payloadFiles(t, filepath.Join(outDir(t), "node.squashfs")),
		"initramfs.cpio.zst": shippedFiles(t, filepath.Join(outDir(t), "initramfs.cpio.zst")),
	} {
		for _, name := range names {
			if !ours[name] && !strings.Contains(notice, noticeName(name)) {
				t.Errorf("NOTICE does not name %s, which %s ships", noticeName(name), archive)
			}
		}
	}
	for _, part := range []string{"Linux kernel (section .linux)", "linuxx64.efi.stub"} {
		if !strings.Contains(notice, part) {
			t.Errorf("NOTICE does not name the boot binary's %s", part)
		}
	}
	for _, bin := range []string{"node", "init"} {
		for _, mod := range goModules(t, filepath.Join(outDir(t), bin)) {
			if !strings.Contains(notice, "- "+mod+":") {
				t.Errorf("NOTICE does not name the Go module %s, compiled into %s", mod, bin)
			}
		}
	}
}

// versioned is a shared library's name past its soname.
var versioned = regexp.MustCompile(`(\.so\.\d+)(\.\d+)+$`)

// noticeName is how NOTICE names a file: by path, shared libraries by
// their soname (with "and its versioned name").
func noticeName(name string) string {
	return versioned.ReplaceAllString(name, "$1")
}

// shippedFiles lists the regular files and symlinks of a zstd cpio archive.
func shippedFiles(t *testing.T, path string) []string {
	t.Helper()
	records, err := uki.InitrdRecords(read(t, path))
	if err != nil {
		t.Fatalf("reading %s: %v", path, err)
	}
	var names []string
	for _, r := range records {
		switch r.Mode & cpio.S_IFMT {
		case cpio.S_IFREG, cpio.S_IFLNK:
			names = append(names, strings.TrimPrefix(r.Name, "/"))
		}
	}
	if len(names) == 0 {
		t.Fatalf("%s holds no files", path)
	}
	return names
}

// payloadFiles lists the regular files and symlinks of the node payload's
// squashfs, as unsquashfs reads it.
func payloadFiles(t *testing.T, path string) []string {
	t.Helper()
	out, err := exec.Command("unsquashfs", "-lls", "-d", "", path).CombinedOutput()
	if err != nil {
		t.Fatalf("unsquashfs -lls %s: %v\n%s", path, err, out)
	}
	var names []string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) >= 6 && (f[0][0] == '-' || f[0][0] == 'l') {
			names = append(names, strings.TrimPrefix(f[5], "/"))
		}
	}
	if len(names) == 0 {
		t.Fatalf("%s holds no files:\n%s", path, out)
	}
	return names
}

// goModules lists the modules (path and version) a Go binary was built
// from.
func goModules(t *testing.T, bin string) []string {
	t.Helper()
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatalf("reading the build information of %s: %v", bin, err)
	}
	var mods []string
	for _, d := range info.Deps {
		mods = append(mods, d.Path+" "+d.Version)
	}
	if len(mods) == 0 {
		t.Fatalf("%s lists no modules", bin)
	}
	return mods
}
