// Package payload is the node payload's layout and its unpacking. The
// payload is a zstd-compressed cpio archive (built by internal/initramfs)
// that the image keeps on the ESP: the node binary with the tools it runs.
// The initramfs holds the payload's SHA-256; init checks it before Unpack.
// This package is small on purpose: init, which must start fast, links it.
package payload

import (
	"bytes"
	"fmt"
	"io"

	"github.com/klauspost/compress/zstd"
	"github.com/u-root/mkuimage/cpio"
)

// Paths inside the archives.
const (
	// NodeBinary is the node binary in the payload.
	NodeBinary = "bin/node"
	// Hash is the payload's SHA-256, in hex, in the initramfs.
	Hash = "etc/borough/node-payload.sha256"
)

// Unpack extracts a compressed cpio archive into root.
func Unpack(compressed []byte, root string) error {
	records, err := Records(compressed)
	if err != nil {
		return err
	}
	for _, r := range records {
		if err := cpio.CreateFileInRoot(r, root, false); err != nil {
			return fmt.Errorf("extracting %s: %w", r.Name, err)
		}
	}
	return nil
}

// Records reads the records of a compressed cpio archive.
func Records(compressed []byte) ([]cpio.Record, error) {
	dec, err := zstd.NewReader(bytes.NewReader(compressed))
	if err != nil {
		return nil, err
	}
	defer dec.Close()
	raw, err := io.ReadAll(dec)
	if err != nil {
		return nil, fmt.Errorf("decompressing payload: %w", err)
	}
	records, err := cpio.ReadAllRecords(cpio.Newc.Reader(bytes.NewReader(raw)))
	if err != nil {
		return nil, fmt.Errorf("reading payload: %w", err)
	}
	return records, nil
}
