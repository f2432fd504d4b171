package main

import (
	"strings"
	"testing"
)

// TestAgree: only a yes admits; anything else, or nothing, does not.
func TestAgree(t *testing.T) {
	for _, tc := range []struct {
		answer string
		want   bool
	}{
		{"y\n", true}, {"YES\n", true}, {" yes ", true},
		{"n\n", false}, {"\n", false}, {"", false}, {"yes please\n", false},
	} {
		var out strings.Builder
		if got := agree(strings.NewReader(tc.answer), &out, "admit? "); got != tc.want || out.String() != "admit? " {
			t.Errorf("agree(%q) = %v (asked %q), want %v", tc.answer, got, out.String(), tc.want)
		}
	}
}
