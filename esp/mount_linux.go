package esp

import (
	"os"

	"golang.org/x/sys/unix"
)

// Mount mounts the ESP on dev at dir, the one way Borough mounts it: vfat,
// without devices, set-uid or executables, files for root alone. init and
// the node each mount it while the other's mount stands (init runs the
// node payload from it), and the kernel lets them share the filesystem
// only with the same flags and options.
func Mount(dev, dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	err := unix.Mount(dev, dir, "vfat", unix.MS_NODEV|unix.MS_NOSUID|unix.MS_NOEXEC, "umask=0077,shortname=mixed")
	if err != nil {
		return &os.PathError{Op: "mount vfat " + dev, Path: dir, Err: err}
	}
	return nil
}
