// Package initramfs builds Borough's zstd-compressed cpio archive, the
// initramfs, holding the static Go init as /init, and collects the files
// of the node payload: the node binary and the host programs the node runs
// (mke2fs, e2fsck), each with the shared libraries it needs, which package
// image writes as a filesystem image (see internal/payload).
//
// It uses u-root's mkuimage (uimage) to collect the files and their
// libraries (through u-root's pkg/ldd) and to write the cpio archive with
// reproducible records, and klauspost/compress for zstd, which the kernel
// decompresses (CONFIG_RD_ZSTD). The same inputs give the same bytes.
package initramfs

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/klauspost/compress/zstd"
	"github.com/u-root/mkuimage/cpio"
	"github.com/u-root/mkuimage/uimage"
	"github.com/u-root/uio/llog"
)

// Params says what goes into the initramfs.
type Params struct {
	// Init, if set, is the host path of the static init binary; it
	// becomes /init.
	Init string
	// Files are host files to add: "PATH" at the same path in the
	// archive, or "PATH:ARCHIVEPATH". ELF programs among them bring the
	// shared libraries they link to.
	Files []string
}

// NodeFiles are the host files the node payload holds besides the node
// binary: the ext4 tools for the data partition, and mke2fs's defaults.
var NodeFiles = []string{"/sbin/mke2fs", "/sbin/e2fsck", "/etc/mke2fs.conf"}

// base is the skeleton every Borough initramfs starts from. The kernel
// needs /dev/console before init runs, to open init's stdio on it.
func base() (*cpio.Archive, error) {
	return cpio.ArchiveFromRecords([]cpio.Record{
		cpio.Directory("dev", 0o755),
		cpio.CharDev("dev/console", 0o600, 5, 1),
		cpio.CharDev("dev/null", 0o666, 1, 3),
		cpio.Directory("data", 0o700),
		cpio.Directory("etc", 0o755),
		cpio.Directory("proc", 0o555),
		cpio.Directory("run", 0o755),
		cpio.Directory("sys", 0o555),
		cpio.Directory("tmp", 0o1777),
	})
}

// Build writes the compressed initramfs to w.
func Build(w io.Writer, p Params) error {
	tmp, err := os.MkdirTemp("", "borough-initramfs")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	archive, err := writeCPIO(tmp, p)
	if err != nil {
		return err
	}
	return compress(w, archive)
}

// Records collects the files of p as Build does, and returns them as
// records rather than an archive: for the node payload, which is a
// filesystem image of them.
func Records(p Params) ([]cpio.Record, error) {
	tmp, err := os.MkdirTemp("", "borough-initramfs")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	archive, err := writeCPIO(tmp, p)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(archive)
	if err != nil {
		return nil, err
	}
	return cpio.ReadAllRecords(cpio.Newc.Reader(bytes.NewReader(b)))
}

// writeCPIO writes the uncompressed archive of p in tmp and returns its
// path.
func writeCPIO(tmp string, p Params) (string, error) {
	archive := filepath.Join(tmp, "initramfs.cpio")
	var files []string
	if p.Init != "" {
		files = append(files, p.Init+":init")
	}
	for _, f := range p.Files {
		src, _, _ := strings.Cut(f, ":")
		if _, err := os.Stat(src); err != nil {
			return "", fmt.Errorf("adding %s to the initramfs: %w", f, err)
		}
		files = append(files, f)
	}
	// uimage only logs a warning when it cannot add a file's libraries;
	// for Borough that is a broken initramfs, so warnings fail the build.
	skeleton, err := base()
	if err != nil {
		return "", fmt.Errorf("creating initramfs skeleton: %w", err)
	}
	warnings := &collector{}
	err = uimage.Create(llog.New(slog.LevelWarn, warnings.printf),
		uimage.WithBaseArchive(skeleton),
		uimage.WithFiles(files...),
		uimage.WithCPIOOutput(archive),
		uimage.WithTempDir(tmp),
	)
	if err != nil {
		return "", fmt.Errorf("creating initramfs archive: %w", err)
	}
	if len(warnings.msgs) > 0 {
		return "", fmt.Errorf("creating initramfs archive: %s", strings.Join(warnings.msgs, "; "))
	}
	return archive, nil
}

func compress(w io.Writer, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	// One encoder goroutine keeps the output independent of the CPU count.
	enc, err := zstd.NewWriter(w, zstd.WithEncoderConcurrency(1), zstd.WithEncoderLevel(zstd.SpeedBetterCompression))
	if err != nil {
		return err
	}
	if _, err := io.Copy(enc, f); err != nil {
		enc.Close()
		return fmt.Errorf("compressing initramfs: %w", err)
	}
	if err := enc.Close(); err != nil {
		return fmt.Errorf("compressing initramfs: %w", err)
	}
	return nil
}

type collector struct {
	mu   sync.Mutex
	msgs []string
}

func (c *collector) printf(format string, v ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.msgs = append(c.msgs, strings.TrimSpace(fmt.Sprintf(format, v...)))
}
