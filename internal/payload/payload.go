// Package payload is the node payload's layout, and how init mounts it.
//
// The payload is a squashfs image on the ESP of the node binary with the
// tools it runs (built by package image), followed by its dm-verity tree
// (package verity). The initramfs holds the image's SHA-256, which names
// its file on the ESP, and its verity descriptor. init attaches the file
// to a read-only loop device, puts a dm-verity device over it, mounts the
// squashfs from that and links its files into the root filesystem: the
// kernel checks every block the node reads against the measured root
// hash, into page cache it can reclaim, where init used to read, hash and
// unpack the whole payload into RAM before the node could start. init
// then reads the node binary once (Prefetch): the node's start needs
// nearly all of it, and one pass in file order is faster than its page
// faults.
//
// This package is small on purpose: init, which must start fast, links it.
package payload

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/borough-os/borough/internal/devmapper"
	"github.com/borough-os/borough/internal/verity"
)

// Paths inside the payload and the initramfs.
const (
	// NodeBinary is the node binary in the payload.
	NodeBinary = "bin/node"
	// Hash is the payload's SHA-256, in hex, in the initramfs.
	Hash = "etc/borough/node-payload.sha256"
	// Verity is the payload's verity descriptor, in the initramfs.
	Verity = "etc/borough/node-payload.verity"
)

// MountPoint is where init mounts the payload.
const MountPoint = "/run/borough/node"

// mapperName is the payload's dm-verity device.
const mapperName = "borough-node"

// Mount attaches the payload in file to a loop device, checks it with
// dm-verity against d, mounts it at MountPoint and links its files into
// root (Link). On failure it undoes what it did, so that the ESP can be
// unmounted.
func Mount(file string, d verity.Descriptor, root string) (err error) {
	loop, err := attachLoop(file)
	if err != nil {
		return err
	}
	// The loop device stays while it is open: until the verity device
	// holds it, or, on failure, not at all.
	dev, err := devmapper.CreateReadOnly(mapperName, []devmapper.Target{{
		Length: d.Sectors(), Type: "verity", Params: []byte(d.Params(loop.Name())),
	}})
	loop.Close()
	if err != nil {
		return fmt.Errorf("checking the node payload with dm-verity: %w", err)
	}
	defer func() {
		if err != nil {
			_ = devmapper.Remove(mapperName)
		}
	}()
	if err := os.MkdirAll(MountPoint, 0o755); err != nil {
		return err
	}
	if err := unix.Mount(dev, MountPoint, "squashfs", unix.MS_RDONLY|unix.MS_NODEV|unix.MS_NOSUID, ""); err != nil {
		return &os.PathError{Op: "mount squashfs " + dev, Path: MountPoint, Err: err}
	}
	if err := Link(root, MountPoint); err != nil {
		_ = unix.Unmount(MountPoint, 0)
		return err
	}
	return nil
}

// Unmount unmounts the payload and removes its verity device, which lets
// its loop device go, once nothing runs from it.
func Unmount() error {
	if err := unix.Unmount(MountPoint, 0); err != nil {
		return &os.PathError{Op: "unmount", Path: MountPoint, Err: err}
	}
	return devmapper.Remove(mapperName)
}

// Prefetch reads the payload's file at path (in the root filesystem, as
// Link made it) once, in order, and so checks each of its blocks: its
// pages are then in the page cache, which the kernel may reclaim. init
// reads the node binary before it starts it because a Go binary's start
// touches pages all over it, and faults that read its blocks in their
// order of use are slower than one pass in file order (docs/decisions.md,
// "The node binary, read once").
// The file goes to /dev/null with sendfile, which reads it into the page
// cache without copying it to init: a read(2) loop spent a tenth of
// init's time from "init started" to the node's start copying 27 MB.
func Prefetch(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer null.Close()
	for {
		n, err := unix.Sendfile(int(null.Fd()), int(f.Fd()), nil, prefetchChunk)
		switch {
		case errors.Is(err, unix.EIO):
			return fmt.Errorf("%w: a block of it does not match the measured root hash, or the disk could not read it",
				&os.PathError{Op: "read", Path: path, Err: err})
		case err != nil:
			return &os.PathError{Op: "sendfile", Path: path, Err: err}
		case n == 0:
			return nil
		}
	}
}

// prefetchChunk is the most Prefetch asks one sendfile for.
const prefetchChunk = 1 << 30

// attachLoop attaches file, read-only, to a free loop device and returns
// it open. The device goes once the last that has it open closes it.
func attachLoop(file string) (*os.File, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("opening the node payload: %w", err)
	}
	defer f.Close()
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	defer ctl.Close()
	n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
	if err != nil {
		return nil, fmt.Errorf("finding a free loop device: %w", err)
	}
	dev := "/dev/loop" + strconv.Itoa(n)
	loop, err := os.OpenFile(dev, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	conf := unix.LoopConfig{Fd: uint32(f.Fd()), Size: verity.BlockSize,
		Info: unix.LoopInfo64{Flags: unix.LO_FLAGS_READ_ONLY | unix.LO_FLAGS_AUTOCLEAR}}
	if err := unix.IoctlLoopConfigure(int(loop.Fd()), &conf); err != nil {
		loop.Close()
		return nil, fmt.Errorf("attaching %s to %s: %w", file, dev, err)
	}
	return loop, nil
}

// Link makes root hold tree's files: each entry of tree that root lacks
// becomes a symbolic link to it, and a directory both hold is linked
// into in turn. An entry root holds that is not a directory in both is an
// error: the payload must not shadow the initramfs.
func Link(root, tree string) error {
	entries, err := os.ReadDir(tree)
	if err != nil {
		return err
	}
	for _, e := range entries {
		src, dst := filepath.Join(tree, e.Name()), filepath.Join(root, e.Name())
		st, err := os.Lstat(dst)
		switch {
		case errors.Is(err, os.ErrNotExist):
			if err := os.Symlink(src, dst); err != nil {
				return err
			}
		case err != nil:
			return err
		case st.IsDir() && e.IsDir():
			if err := Link(dst, src); err != nil {
				return err
			}
		default:
			return fmt.Errorf("the node payload's %s would replace the initramfs's %s", src, dst)
		}
	}
	return nil
}
