package entropy

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/borough-os/borough/esp"
)

func TestCreditSeedFile(t *testing.T) {
	seed := bytes.Repeat([]byte{0x5a}, seedSize)
	for _, tc := range []struct {
		name     string
		content  []byte // nil: no file
		credited bool
		err      string
		// after is what the file must hold afterwards; nil: no file.
		after []byte
	}{
		{"no seed file", nil, false, "", nil},
		{"seed", seed, true, "", successor(seed)},
		{"short seed", seed[:10], false, "is 10 bytes, want 64; not crediting it", seed[:10]},
		{"empty seed", []byte{}, false, "is 0 bytes", []byte{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "random-seed")
			if tc.content != nil {
				if err := os.WriteFile(path, tc.content, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			credited, err := creditSeedFile(path)
			if os.Geteuid() != 0 && tc.credited {
				t.Skip("crediting the pool needs root")
			}
			if credited != tc.credited || (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("creditSeedFile = %v, %v; want %v, error %q", credited, err, tc.credited, tc.err)
			}
			got, err := os.ReadFile(path)
			switch {
			case tc.after == nil && !errors.Is(err, os.ErrNotExist):
				t.Errorf("seed file after: %x, %v; want none", got, err)
			case tc.after != nil && !bytes.Equal(got, tc.after):
				t.Errorf("seed file after = %x, want %x", got, tc.after)
			}
		})
	}
}

// TestSuccessor checks that a seed's successor is neither the seed nor
// its own successor, so that no boot credits what another did.
func TestSuccessor(t *testing.T) {
	seed := bytes.Repeat([]byte{1}, seedSize)
	next := successor(seed)
	if len(next) != seedSize || bytes.Equal(next, seed) || bytes.Equal(successor(next), next) {
		t.Errorf("successor(%x) = %x", seed, next)
	}
}

// TestSeedRefresh: Seed credits the seed file it finds, says the pool
// was ready before (it is, on this machine), and its refresh writes a
// fresh seed each time.
func TestSeedRefresh(t *testing.T) {
	if !Ready() {
		t.Skip("this machine's random pool is not ready")
	}
	root := t.TempDir()
	path := esp.RandomSeed.In(root)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, bytes.Repeat([]byte{3}, seedSize), 0o600); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	refresh := Seed(slog.New(slog.NewTextHandler(&log, nil)), root, nil)
	if os.Geteuid() == 0 && !strings.Contains(log.String(), `msg="random pool seeded" credited="seed file" ready_before=true`) {
		t.Errorf("Seed logged %q, want it to credit the seed file to a pool ready before", log.String())
	}
	var seeds [][]byte
	for range 2 {
		refresh()
		b, err := os.ReadFile(path)
		if err != nil || len(b) != seedSize {
			t.Fatalf("seed file after refresh: %d bytes, %v", len(b), err)
		}
		seeds = append(seeds, b)
	}
	if bytes.Equal(seeds[0], seeds[1]) {
		t.Error("two refreshes wrote the same seed")
	}
}
