package support

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// TestBundle: a bundle is a .tar.zst of what was added, with a MANIFEST
// that lists each file and what could not be had.
func TestBundle(t *testing.T) {
	var progress strings.Builder
	b, err := New(&progress)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.AddJSON("cluster/health.json", map[string]bool{"healthy": true}); err != nil {
		t.Fatal(err)
	}
	b.Missing("node-a's node API", errors.New("connection refused"))
	data, err := b.Close()
	if err != nil {
		t.Fatal(err)
	}
	zr, err := zstd.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	files := map[string]string{}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = string(body)
	}
	if !strings.Contains(files["cluster/health.json"], `"healthy": true`) {
		t.Errorf("health.json = %q", files["cluster/health.json"])
	}
	for _, want := range []string{"cluster/health.json\t", "MISSING node-a's node API: connection refused"} {
		if !strings.Contains(files["MANIFEST"], want) {
			t.Errorf("MANIFEST lacks %q:\n%s", want, files["MANIFEST"])
		}
	}
	if !strings.Contains(progress.String(), "support: no node-a's node API") {
		t.Errorf("progress does not say what is missing: %q", progress.String())
	}
}
