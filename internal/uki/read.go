package uki

import (
	"bufio"
	"bytes"
	"debug/pe"
	"fmt"
	"strconv"
	"strings"
)

// Version returns the VERSION_ID of the UKI's os-release section: the
// version the node booted, as `borough image build --version` wrote it.
func Version(path string) (string, error) {
	f, err := pe.Open(path)
	if err != nil {
		return "", fmt.Errorf("reading the boot binary %s: %w", path, err)
	}
	defer f.Close()
	s := f.Section(SectionOSRel)
	if s == nil {
		return "", fmt.Errorf("the boot binary %s has no %s section", path, SectionOSRel)
	}
	data, err := s.Data()
	if err != nil {
		return "", fmt.Errorf("reading %s of %s: %w", SectionOSRel, path, err)
	}
	// A section's data is padded to the file alignment with zeros.
	sc := bufio.NewScanner(bytes.NewReader(bytes.TrimRight(data, "\x00")))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VERSION_ID="); ok {
			if u, err := strconv.Unquote(v); err == nil {
				return u, nil
			}
			return v, nil
		}
	}
	return "", fmt.Errorf("the os-release of %s has no VERSION_ID", path)
}
