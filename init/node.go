package main

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"golang.org/x/sys/unix"

	"github.com/borough-os/borough/esp"
	"github.com/borough-os/borough/internal/bootdisk"
)

// nodeSHA256 is the hex SHA-256 of the node binary this init runs; the
// build sets it (-ldflags -X main.nodeSHA256=...).
var nodeSHA256 string

const (
	// nodePath is where the verified node binary runs from (tmpfs).
	nodePath = "/run/borough/node"
	// espMount is where init mounts the ESP, read-only, for the copy.
	espMount = "/run/borough/esp-boot"
)

// loadNode copies the node binary from the boot disk's ESP to nodePath,
// checks its hash, and returns its path.
func loadNode(log *slog.Logger) (path string, err error) {
	if len(nodeSHA256) != 2*sha256.Size {
		return "", errors.New("this init was built without the node binary's hash; build with ./build.sh")
	}
	disk, err := bootdisk.FindDisk("/sys", "/dev", "/sys/firmware/efi/efivars")
	if err != nil {
		return "", fmt.Errorf("finding boot disk: %w", err)
	}
	if err := os.MkdirAll(espMount, 0o700); err != nil {
		return "", err
	}
	if err := unix.Mount(disk.ESP, espMount, "vfat", unix.MS_RDONLY|unix.MS_NODEV|unix.MS_NOSUID|unix.MS_NOEXEC, ""); err != nil {
		return "", &os.PathError{Op: "mount vfat read-only " + disk.ESP, Path: espMount, Err: err}
	}
	defer func() {
		if uerr := unix.Unmount(espMount, 0); uerr != nil && err == nil {
			err = fmt.Errorf("unmounting %s: %w", espMount, uerr)
		}
	}()
	b, err := os.ReadFile(esp.NodeBinary.In(espMount))
	if err != nil {
		return "", fmt.Errorf("reading the node binary: %w", err)
	}
	sum := sha256.Sum256(b)
	if got := hex.EncodeToString(sum[:]); got != nodeSHA256 {
		return "", fmt.Errorf("the node binary on the ESP (%s) has SHA-256 %s, but this boot binary runs %s: "+
			"the ESP was changed or is from another build", esp.NodeBinary, got, nodeSHA256)
	}
	if err := os.WriteFile(nodePath, b, 0o500); err != nil {
		return "", fmt.Errorf("copying the node binary: %w", err)
	}
	log.Info("node binary verified", "sha256", nodeSHA256[:16], "bytes", len(b))
	return nodePath, nil
}
