package ownersession

import (
	"strings"
	"testing"
)

// TestAPI finds a member's node API: the address given, or its first
// client URL's host; an error names the flag that would give it.
func TestAPI(t *testing.T) {
	given := map[string]string{"node-b": "127.0.0.1:7836", "node-c": "[::1]:7837"}
	for _, tc := range []struct {
		name string
		urls []string
		want string
		err  string
	}{
		{"node-a", []string{"https://10.77.0.1:2379"}, "10.77.0.1:7835", ""},
		{"node-a", []string{"https://[fd00::1]:2379", "https://10.0.0.1:2379"}, "[fd00::1]:7835", ""},
		{"node-b", []string{"https://10.77.0.2:2379"}, "127.0.0.1:7836", ""},
		{"node-c", nil, "[::1]:7837", ""},
		{"node-d", nil, "", "no client URL"},
		{"node-e", []string{"10.77.0.5"}, "", `client URL "10.77.0.5" names no host`},
	} {
		got, err := API(tc.name, tc.urls, given)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "--api "+tc.name+"=") {
				t.Errorf("API(%s, %v) = %q, %v; want error %q naming the flag", tc.name, tc.urls, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("API(%s, %v) = %q, %v; want %q", tc.name, tc.urls, got, err, tc.want)
		}
	}
}
