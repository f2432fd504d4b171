package tpm

import (
	"errors"
	"fmt"

	"github.com/google/go-tpm/tpm2"
)

// maxRandomChunk is what one TPM2_GetRandom is asked for: the TPM returns
// at most the size of its largest digest (32 to 64 bytes) per call.
const maxRandomChunk = 64

// Random returns n bytes from the TPM's random number generator.
func (t *TPM) Random(n int) ([]byte, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n < 0 {
		return nil, fmt.Errorf("reading TPM random: negative count %d", n)
	}
	b := make([]byte, 0, n)
	for len(b) < n {
		want := min(n-len(b), maxRandomChunk)
		rsp, err := tpm2.GetRandom{BytesRequested: uint16(want)}.Execute(t.t)
		if err != nil {
			return nil, fmt.Errorf("reading TPM random: %w", err)
		}
		got := rsp.RandomBytes.Buffer
		// An empty answer would loop forever.
		if len(got) == 0 {
			return nil, errors.New("reading TPM random: TPM returned no bytes")
		}
		b = append(b, got[:min(len(got), want)]...)
	}
	return b, nil
}
