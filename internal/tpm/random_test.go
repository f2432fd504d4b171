package tpm

import (
	"bytes"
	"testing"
)

func TestRandom(t *testing.T) {
	tp := newTPM(t, 1)
	for _, n := range []int{0, 1, 32, 64, 100} {
		a, err := tp.Random(n)
		if err != nil {
			t.Fatalf("Random(%d): %v", n, err)
		}
		b, err := tp.Random(n)
		if err != nil {
			t.Fatalf("Random(%d): %v", n, err)
		}
		if len(a) != n || len(b) != n {
			t.Errorf("Random(%d) returned %d and %d bytes", n, len(a), len(b))
		}
		// Two 1-byte draws collide with probability 1/256.
		if n >= 32 && bytes.Equal(a, b) {
			t.Errorf("Random(%d) returned %x twice", n, a)
		}
	}
	if _, err := tp.Random(-1); err == nil {
		t.Error("Random(-1) succeeded")
	}
}
