package qemu

import (
	"context"
	"testing"
)

// TestProbeFirmware runs the KVM probe's firmware under TCG, which always
// works: it proves that the probe can succeed, so a failing KVM probe
// means KVM, not the probe, is broken.
func TestProbeFirmware(t *testing.T) {
	if err := probe(context.Background(), "tcg"); err != nil {
		t.Fatalf("probe firmware under TCG: %v", err)
	}
}
