package qemu

import (
	"fmt"
	"strings"
	"testing"
)

func TestTail(t *testing.T) {
	numbered := func(from, to int) []string {
		var l []string
		for i := from; i <= to; i++ {
			l = append(l, fmt.Sprintf("line %d", i))
		}
		return l
	}
	join := func(parts ...[]string) string {
		var all []string
		for _, p := range parts {
			all = append(all, p...)
		}
		return strings.Join(all, "\n") + "\n"
	}
	panicked := join(numbered(1, 10), []string{"panic: failed to apply"}, numbered(12, 40))
	tests := []struct {
		name, console string
		n             int
		want          string
	}{
		{"short console", join(numbered(1, 3)), 5, join(numbered(1, 3))},
		{"last lines", join(numbered(1, 10)), 3, join(numbered(8, 10))},
		{
			"panic before the tail", panicked, 3,
			"[console lines 7-15, around a panic]\n" + join(numbered(7, 10), []string{"panic: failed to apply"}, numbered(12, 15)) +
				"[...]\n" + join(numbered(38, 40)),
		},
		{
			"panic context cut at the tail", panicked, 28,
			"[console lines 7-12, around a panic]\n" + join(numbered(7, 10), []string{"panic: failed to apply"}, numbered(12, 12)) +
				"[...]\n" + join(numbered(13, 40)),
		},
		{"panic within the tail", panicked, 35, join(numbered(6, 10), []string{"panic: failed to apply"}, numbered(12, 40))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ConsoleTail(tt.console, tt.n) + "\n"; got != tt.want {
				t.Errorf("ConsoleTail(%d) =\n%s\nwant\n%s", tt.n, got, tt.want)
			}
		})
	}
}
