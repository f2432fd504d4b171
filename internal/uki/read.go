package uki

import (
	"bufio"
	"bytes"
	"debug/pe"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/klauspost/compress/zstd"
	"github.com/u-root/mkuimage/cpio"
)

// Version returns the VERSION_ID of the UKI's os-release section: the
// version the node booted, as `borough image build --version` wrote it.
func Version(path string) (string, error) {
	f, err := pe.Open(path)
	if err != nil {
		return "", fmt.Errorf("reading the boot binary %s: %w", path, err)
	}
	defer f.Close()
	v, err := version(f)
	if err != nil {
		return "", fmt.Errorf("the boot binary %s: %w", path, err)
	}
	return v, nil
}

// VersionOf is Version of a UKI in memory.
func VersionOf(b []byte) (string, error) {
	f, err := pe.NewFile(bytes.NewReader(b))
	if err != nil {
		return "", fmt.Errorf("not a PE image: %w", err)
	}
	return version(f)
}

func version(f *pe.File) (string, error) {
	s := f.Section(SectionOSRel)
	if s == nil {
		return "", fmt.Errorf("no %s section", SectionOSRel)
	}
	data, err := SectionData(s)
	if err != nil {
		return "", fmt.Errorf("reading %s: %w", SectionOSRel, err)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VERSION_ID="); ok {
			if u, err := strconv.Unquote(v); err == nil {
				return u, nil
			}
			return v, nil
		}
	}
	return "", errors.New("its os-release has no VERSION_ID")
}

// SectionData returns a section's data without the padding to the file
// alignment that follows it: its virtual size is the size of what the
// builder put there.
func SectionData(s *pe.Section) ([]byte, error) {
	data, err := s.Data()
	if err != nil {
		return nil, err
	}
	if n := int(s.VirtualSize); n > 0 && n < len(data) {
		data = data[:n]
	}
	return data, nil
}

// InitrdRecords reads the records of a UKI's initramfs, a zstd-compressed
// newc cpio archive as package image writes it. It lives here, not with
// the payload that init mounts: init need not link zstd and cpio.
func InitrdRecords(compressed []byte) ([]cpio.Record, error) {
	dec, err := zstd.NewReader(bytes.NewReader(compressed))
	if err != nil {
		return nil, err
	}
	defer dec.Close()
	raw, err := io.ReadAll(dec)
	if err != nil {
		return nil, fmt.Errorf("decompressing the archive: %w", err)
	}
	records, err := cpio.ReadAllRecords(cpio.Newc.Reader(bytes.NewReader(raw)))
	if err != nil {
		return nil, fmt.Errorf("reading the archive: %w", err)
	}
	return records, nil
}
