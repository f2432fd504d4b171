package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
	}{
		{"4096", 4096}, {"1GiB", 1 << 30}, {"1G", 1 << 30}, {"512M", 512 << 20},
		{"512MB", 512 << 20}, {"2T", 2 << 40}, {"64K", 64 << 10},
		{"", -1}, {"G", -1}, {"1X", -1}, {"-1G", -1}, {"1.5G", -1}, {"0", -1},
		{"9999999999T", -1}, {"1iG", -1},
	} {
		got, err := parseSize(tc.in)
		if tc.want < 0 {
			if err == nil {
				t.Errorf("parseSize(%q) = %d, want an error", tc.in, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("parseSize(%q) = %d, %v, want %d", tc.in, got, err, tc.want)
		}
	}
}

func TestParseForward(t *testing.T) {
	for _, tc := range []struct {
		in   string
		ok   bool
		h, g int
	}{
		{"2379:2379", true, 2379, 2379}, {"8080:80", true, 8080, 80},
		{"2379", false, 0, 0}, {"a:b", false, 0, 0}, {"0:1", false, 0, 0}, {"1:70000", false, 0, 0},
	} {
		got, err := parseForward(tc.in)
		if (err == nil) != tc.ok || (tc.ok && (got.Host != tc.h || got.Guest != tc.g)) {
			t.Errorf("parseForward(%q) = %+v, %v", tc.in, got, err)
		}
	}
}

// TestImageBuildMakesOut builds an image (of stand-in binaries) into a
// directory that does not exist yet: build makes it, as a user who names
// a new directory expects.
func TestImageBuildMakesOut(t *testing.T) {
	out := filepath.Join(t.TempDir(), "new", "dir")
	var log strings.Builder
	if err := run([]string{"image", "build", "--kernel", "/bin/true", "--init", "/bin/true", "--node", "/bin/true",
		"--out", out, "--size", "600MiB"}, &log, &log); err != nil {
		t.Fatalf("image build --out %s: %v\n%s", out, err, log.String())
	}
	if _, err := os.Stat(filepath.Join(out, imageFile)); err != nil {
		t.Error(err)
	}
}
