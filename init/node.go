package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/borough-os/borough/esp"
	"github.com/borough-os/borough/internal/bootdisk"
	"github.com/borough-os/borough/internal/payload"
	"github.com/borough-os/borough/internal/timeline"
)

// espMount is where init mounts the ESP, read-only, to read the payload.
const espMount = "/run/borough/esp-boot"

// loadNode reads the node payload from the boot disk's ESP, checks it
// against the hash in this initramfs, unpacks it into the root filesystem
// and returns the node binary's path, marking each step on tl.
func loadNode(log *slog.Logger, tl *timeline.Timeline) (path string, err error) {
	want, err := os.ReadFile("/" + payload.Hash)
	if err != nil {
		return "", fmt.Errorf("reading the node payload's hash from the initramfs: %w", err)
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
	sha := strings.TrimSpace(string(want))
	file := esp.NodePayload(sha)
	archive, err := os.ReadFile(file.In(espMount))
	if uerr := unix.Unmount(espMount, 0); uerr != nil && err == nil {
		err = fmt.Errorf("unmounting %s: %w", espMount, uerr)
	}
	if err != nil {
		return "", fmt.Errorf("reading the node payload: %w", err)
	}
	tl.Mark(timeline.PayloadRead)
	sum := sha256.Sum256(archive)
	if got := hex.EncodeToString(sum[:]); got != sha {
		return "", fmt.Errorf("the node payload on the ESP (%s) has SHA-256 %s, but this boot binary runs %s: "+
			"the ESP was changed or is from another build", file, got, sha)
	}
	tl.Mark(timeline.PayloadVerified)
	if err := payload.Unpack(archive, "/"); err != nil {
		return "", fmt.Errorf("unpacking the node payload: %w", err)
	}
	tl.Mark(timeline.PayloadUnpacked)
	log.Info("node payload verified and unpacked", "sha256", hex.EncodeToString(sum[:8]), "bytes", len(archive))
	return filepath.Join("/", payload.NodeBinary), nil
}
