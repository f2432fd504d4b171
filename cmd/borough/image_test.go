package main

import "testing"

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
