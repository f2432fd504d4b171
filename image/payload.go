package image

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/u-root/mkuimage/cpio"
	"github.com/u-root/uio/uio"

	"github.com/borough-os/borough/internal/verity"
)

// payloadBlockSize is the squashfs block size of the node payload: the
// unit the kernel reads and decompresses when the node touches a page of
// it. 128 KiB started the node soonest of 16 KiB to 1 MiB
// (docs/decisions.md, "The node payload").
const payloadBlockSize = 128 << 10

// NodePayload writes the node payload's files (initramfs.Records) as an
// LZ4 squashfs image stamped with epoch (DefaultEpoch if zero), with its
// dm-verity tree appended, and returns it with the tree's descriptor.
// Device nodes are left out: the node's /dev is the kernel's devtmpfs.
//
// The image is mksquashfs's (Debian's squashfs-tools), in its
// reproducible mode. go-diskfs, which writes the rest of the disk image,
// has a squashfs writer, but in v1.9.4 it reads a symbolic link's target
// relative to the process's working directory rather than its workspace,
// so it cannot write the shared libraries' links.
//
// LZ4 (high compression), not zstd: the kernel decompresses what the
// node reads on every boot, and LZ4 does it about four times as fast for
// 15% more bytes. Squashfs, not EROFS: Linux 6.1's EROFS decompressed a
// cluster again for every readahead window it crossed, and read the node
// binary two to four times slower (docs/decisions.md, "The node
// payload").
func NodePayload(records []cpio.Record, epoch time.Time) ([]byte, verity.Descriptor, error) {
	if epoch.IsZero() {
		epoch = DefaultEpoch
	}
	tmp, err := os.MkdirTemp("", "borough-payload")
	if err != nil {
		return nil, verity.Descriptor{}, err
	}
	defer os.RemoveAll(tmp)
	tree, out := filepath.Join(tmp, "tree"), filepath.Join(tmp, "payload.squashfs")
	if err := extract(tree, records); err != nil {
		return nil, verity.Descriptor{}, err
	}
	stamp := strconv.FormatInt(epoch.Unix(), 10)
	cmd := exec.Command("mksquashfs", tree, out, "-noappend", "-quiet", "-no-progress", "-comp", "lz4", "-Xhc",
		"-b", strconv.Itoa(payloadBlockSize), "-all-root", "-no-xattrs", "-mkfs-time", stamp, "-all-time", stamp)
	// mksquashfs refuses SOURCE_DATE_EPOCH beside the times given here,
	// which are the same.
	cmd.Env = slices.DeleteFunc(os.Environ(), func(e string) bool { return strings.HasPrefix(e, "SOURCE_DATE_EPOCH=") })
	if b, err := cmd.CombinedOutput(); errors.Is(err, exec.ErrNotFound) {
		return nil, verity.Descriptor{}, fmt.Errorf("building the node payload: %w (apt-get install squashfs-tools)", err)
	} else if err != nil {
		return nil, verity.Descriptor{}, fmt.Errorf("mksquashfs: %w\n%s", err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		return nil, verity.Descriptor{}, err
	}
	img, d := verity.Build(b)
	return img, d, nil
}

// extract creates the directories, files and symbolic links of records
// under dir. It is not cpio.CreateFileInRoot, which sets a link's mode and
// owner through the link: on the build host, a library's absolute link
// would change the host's library.
func extract(dir string, records []cpio.Record) error {
	for _, r := range records {
		path := filepath.Join(dir, filepath.Clean("/"+r.Name))
		mode := os.FileMode(r.Mode & 0o7777)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		var err error
		switch r.Mode & cpio.S_IFMT {
		case cpio.S_IFDIR:
			if err = os.MkdirAll(path, 0o755); err == nil {
				err = os.Chmod(path, mode)
			}
		case cpio.S_IFREG:
			err = writeRecord(path, r, mode)
		case cpio.S_IFLNK:
			var target []byte
			if target, err = io.ReadAll(uio.Reader(r)); err == nil {
				err = os.Symlink(string(target), path)
			}
		case cpio.S_IFCHR, cpio.S_IFBLK:
		default:
			err = fmt.Errorf("mode %#o is no file, directory or link", r.Mode)
		}
		if err != nil {
			return fmt.Errorf("adding %s to the payload: %w", r.Name, err)
		}
	}
	return nil
}

func writeRecord(path string, r cpio.Record, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, uio.Reader(r)); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Chmod(path, mode)
}
