package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/borough-os/borough/image"
	"github.com/borough-os/borough/internal/initramfs"
	"github.com/borough-os/borough/internal/payload"
	"github.com/borough-os/borough/internal/secureboot"
	"github.com/borough-os/borough/internal/uki"
	"github.com/borough-os/borough/internal/verity"
)

func imageCommand() *cobra.Command {
	c := &cobra.Command{Use: "image", Short: "Build Borough disk images"}
	c.AddCommand(imageBuildCommand(), imageEnrolCommand(), imageSignCommand())
	return c
}

// Output file names in the output directory.
const (
	initramfsFile = "initramfs.cpio.zst"
	payloadFile   = "node.squashfs"
	bootFile      = "borough.efi"
	imageFile     = "borough.img"
)

type imageBuildFlags struct {
	kernel, init, node, stub, outDir string
	size, version, appendArgs        string
	secureBoot                       string
	sign                             bool
}

func imageBuildCommand() *cobra.Command {
	var f imageBuildFlags
	c := &cobra.Command{
		Use:   "build",
		Short: "Build the initramfs, boot binary and disk image from a kernel and an init",
		Long: `Build writes, in --out:
  ` + payloadFile + `       the node payload: node binary and the tools it runs, with its dm-verity tree
  ` + initramfsFile + `  the initramfs: init, the node payload's hash and verity root
  ` + bootFile + `         the unified kernel image (boot binary)
  ` + imageFile + `         the GPT disk image, sparse, with the boot binary and
                      the node payload on its ESP

SOURCE_DATE_EPOCH, when set, stamps the files on the ESP.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return buildImage(cmd, f)
		},
	}
	c.Flags().StringVar(&f.kernel, "kernel", "out/vmlinuz", "kernel bzImage with the EFI stub")
	c.Flags().StringVar(&f.init, "init", "out/init", "static init binary (built with the node binary's hash)")
	c.Flags().StringVar(&f.node, "node", "out/node", "static node binary, for the node payload on the ESP")
	c.Flags().StringVar(&f.stub, "stub", uki.DebianStub, "systemd EFI stub")
	c.Flags().StringVar(&f.outDir, "out", "out", "output directory")
	c.Flags().StringVar(&f.size, "size", "1GiB", "image size (K, M, G, T suffixes are powers of 1024)")
	c.Flags().StringVar(&f.version, "version", "dev", "version recorded in the boot binary")
	c.Flags().StringVar(&f.appendArgs, "append", "", "extra kernel command line parameters")
	c.Flags().StringVar(&f.secureBoot, "secureboot", "",
		"directory of the owner's Secure Boot keys (borough secureboot init): sign the boot binary with its db key "+
			"and put its signed key updates on the ESP, for the node to enrol in setup mode")
	c.Flags().BoolVar(&f.sign, "sign", false, "sign the version with the owner's key (borough image sign), for the owner's nodes to take as an update")
	return c
}

func buildImage(cmd *cobra.Command, f imageBuildFlags) error {
	size, err := parseSize(f.size)
	if err != nil {
		return fmt.Errorf("--size: %w", err)
	}
	epoch, err := sourceDateEpoch()
	if err != nil {
		return err
	}
	step := func(format string, a ...any) func() {
		start := time.Now()
		return func() {
			fmt.Fprintf(cmd.ErrOrStderr(), "image: %s (%.2f s)\n", fmt.Sprintf(format, a...), time.Since(start).Seconds())
		}
	}

	if err := os.MkdirAll(f.outDir, 0o755); err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	payloadPath := filepath.Join(f.outDir, payloadFile)
	done := step("node payload %s", payloadPath)
	node, tree, err := writePayload(payloadPath, epoch, initramfs.Params{
		Files: append([]string{f.node + ":" + payload.NodeBinary}, initramfs.NodeFiles...),
	})
	if err != nil {
		return err
	}
	done()

	// The initramfs carries the payload's hash, which names it on the
	// ESP, and its verity descriptor, which checks it as it is read: init
	// runs only the payload that the (measured) boot binary names.
	sum := sha256.Sum256(node)
	hashFile := filepath.Join(f.outDir, "node-payload.sha256")
	if err := os.WriteFile(hashFile, []byte(hex.EncodeToString(sum[:])+"\n"), 0o644); err != nil {
		return err
	}
	verityFile := filepath.Join(f.outDir, "node-payload.verity")
	if err := os.WriteFile(verityFile, []byte(tree.String()+"\n"), 0o644); err != nil {
		return err
	}
	done = step("initramfs %s", filepath.Join(f.outDir, initramfsFile))
	initrd, err := writeArchive(filepath.Join(f.outDir, initramfsFile), initramfs.Params{
		Init: f.init, Files: []string{hashFile + ":" + payload.Hash, verityFile + ":" + payload.Verity},
	})
	if err != nil {
		return err
	}
	done()

	done = step("boot binary %s", filepath.Join(f.outDir, bootFile))
	boot, err := writeBootBinary(f, initrd)
	if err != nil {
		return err
	}
	done()

	var updates map[string][]byte
	if f.secureBoot != "" {
		if updates, err = secureboot.Updates(f.secureBoot); err != nil {
			return err
		}
	}
	done = step("disk image %s, %s", filepath.Join(f.outDir, imageFile), f.size)
	err = image.Build(filepath.Join(f.outDir, imageFile), image.Params{
		BootBinary: boot, NodePayload: node, SecureBootUpdates: updates, Size: size, Epoch: epoch,
	})
	if err != nil {
		return err
	}
	done()
	if f.sign {
		return signImage(cmd.OutOrStdout(), filepath.Join(f.outDir, imageFile), false)
	}
	return nil
}

// writeArchive builds an archive to path and returns its bytes.
func writeArchive(path string, p initramfs.Params) ([]byte, error) {
	out, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	defer out.Close()
	if err := initramfs.Build(out, p); err != nil {
		return nil, err
	}
	if err := out.Close(); err != nil {
		return nil, err
	}
	return os.ReadFile(path)
}

// writePayload builds the node payload of p's files to path and returns
// its bytes and verity descriptor.
func writePayload(path string, epoch time.Time, p initramfs.Params) ([]byte, verity.Descriptor, error) {
	records, err := initramfs.Records(p)
	if err != nil {
		return nil, verity.Descriptor{}, err
	}
	b, tree, err := image.NodePayload(records, epoch)
	if err != nil {
		return nil, verity.Descriptor{}, err
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return nil, verity.Descriptor{}, err
	}
	return b, tree, nil
}

func writeBootBinary(f imageBuildFlags, initrd []byte) ([]byte, error) {
	stub, err := os.ReadFile(f.stub)
	if err != nil {
		return nil, fmt.Errorf("reading EFI stub (apt-get install systemd-boot-efi): %w", err)
	}
	kernel, err := os.ReadFile(f.kernel)
	if err != nil {
		return nil, fmt.Errorf("reading kernel (run kernel/build.sh): %w", err)
	}
	cmdline := image.DefaultCmdline
	if f.appendArgs != "" {
		cmdline += " " + f.appendArgs
	}
	boot, err := image.BootBinary(image.BootParams{
		Stub: stub, Kernel: kernel, Initramfs: initrd, Cmdline: cmdline, Version: f.version,
	})
	if err != nil {
		return nil, err
	}
	if f.secureBoot != "" {
		if boot, err = secureboot.Sign(boot, f.secureBoot); err != nil {
			return nil, err
		}
	}
	return boot, os.WriteFile(filepath.Join(f.outDir, bootFile), boot, 0o644)
}

func sourceDateEpoch() (time.Time, error) {
	s := os.Getenv("SOURCE_DATE_EPOCH")
	if s == "" {
		return time.Time{}, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH=%q is not a number of seconds", s)
	}
	return time.Unix(n, 0).UTC(), nil
}

// parseSize parses sizes like "1GiB", "512M", "4096" (bytes). K, M, G and
// T are powers of 1024, with or without "iB" or "B".
func parseSize(s string) (int64, error) {
	num := strings.TrimRight(s, "KMGTiB")
	unit := strings.TrimSuffix(strings.TrimSuffix(s[len(num):], "B"), "i")
	shift, ok := map[string]uint{"": 0, "K": 10, "M": 20, "G": 30, "T": 40}[unit]
	n, err := strconv.ParseInt(num, 10, 64)
	if !ok || err != nil || n <= 0 {
		return 0, fmt.Errorf("%q is not a size like 1GiB, 512M or 4096", s)
	}
	if n > (1<<62)>>shift {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return n << shift, nil
}
