package main

import (
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
	"github.com/borough-os/borough/internal/verity"
)

// espMount is where init mounts the ESP (esp.Mount), to run the payload
// from it. It stays mounted while the node runs, and the node mounts it
// again where it wants it.
const espMount = "/run/borough/esp-boot"

// loadNode mounts the node payload this initramfs names from the boot
// disk's ESP, checked block by block against the verity root hash in this
// initramfs, and returns the node binary's path.
func loadNode(log *slog.Logger, tl *timeline.Timeline) (path string, err error) {
	sha, err := os.ReadFile("/" + payload.Hash)
	if err != nil {
		return "", fmt.Errorf("reading the node payload's hash from the initramfs: %w", err)
	}
	b, err := os.ReadFile("/" + payload.Verity)
	if err != nil {
		return "", fmt.Errorf("reading the node payload's verity descriptor from the initramfs: %w", err)
	}
	tree, err := verity.Parse(strings.TrimSpace(string(b)))
	if err != nil {
		return "", err
	}
	disk, err := bootdisk.FindDisk("/sys", "/dev", "/sys/firmware/efi/efivars")
	if err != nil {
		return "", fmt.Errorf("finding boot disk: %w", err)
	}
	if err := esp.Mount(disk.ESP, espMount); err != nil {
		return "", err
	}
	file := esp.NodePayload(strings.TrimSpace(string(sha)))
	if err := payload.Mount(file.In(espMount), tree, "/"); err != nil {
		// Unmounted cleanly, the ESP is not left marked dirty by a boot
		// that stops here.
		_ = unix.Unmount(espMount, 0)
		return "", fmt.Errorf("the node payload %s: %w", file, err)
	}
	tl.Mark(timeline.PayloadMounted)
	log.Info("node payload mounted, checked by dm-verity", "file", string(file), "root_hash", fmt.Sprintf("%x", tree.Root[:8]))
	node := filepath.Join("/", payload.NodeBinary)
	if err := payload.Prefetch(node); err != nil {
		return "", fmt.Errorf("the node payload %s: %w", file, err)
	}
	tl.Mark(timeline.NodeRead)
	return node, nil
}

// releaseNode undoes loadNode once the node has ended, so that the ESP is
// unmounted cleanly before the machine stops: FAT marks a volume mounted
// for writing as dirty until then.
func releaseNode() error {
	if err := payload.Unmount(); err != nil {
		return err
	}
	if err := unix.Unmount(espMount, 0); err != nil {
		return &os.PathError{Op: "unmount", Path: espMount, Err: err}
	}
	return nil
}
