package qemu

import (
	"os"
	"testing"
)

func TestParseStatCPU(t *testing.T) {
	for _, tc := range []struct {
		name, stat string
		want       uint64
		wantErr    bool
	}{
		{"plain", "4242 (qemu-system-x86) S 1 4242 4242 0 -1 4194560 100 0 0 0 1500 250 0 0 20 0 9 0 1000 1 1", 1750, false},
		{"name with spaces and parentheses", "7 (a (b) c) R 1 7 7 0 -1 0 0 0 0 0 3 4 0 0", 7, false},
		{"no name", "4242 qemu S 1", 0, true},
		{"too short", "4242 (qemu) S 1 2 3", 0, true},
		{"not a number", "1 (x) S 1 1 1 0 -1 0 0 0 0 0 ten 4 0 0", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseStatCPU(tc.stat)
			if (err != nil) != tc.wantErr {
				t.Fatalf("parseStatCPU: %d, %v; want an error: %v", got, err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("parseStatCPU = %d, want %d", got, tc.want)
			}
		})
	}
}

// TestProcessCPU reads this process's own CPU time after burning some.
func TestProcessCPU(t *testing.T) {
	before, err := processCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	x := 0
	for i := range 200_000_000 {
		x ^= i
	}
	after, err := processCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if after <= before {
		t.Errorf("CPU time did not grow after a busy loop (%d): %v then %v", x, before, after)
	}
}
