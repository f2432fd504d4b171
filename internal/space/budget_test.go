package space

import (
	"strings"
	"testing"
)

func TestPlan(t *testing.T) {
	for _, tc := range []struct {
		name      string
		volume    int64
		wantQuota int64 // in MiB, 0 for an error
	}{
		{"the smallest volume", 384 * MiB, 66},
		{"the test volume of TestSpace", 400 * MiB, 74},
		{"the image's volume", 722 * MiB, 226},
		{"one GiB", GiB, 358},
		{"a small disk", 32 * GiB, 8192},
		{"a large disk", 2000 * GiB, 8192},
		{"too small", 300 * MiB, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := Plan(tc.volume)
			if tc.wantQuota == 0 {
				if err == nil || !strings.Contains(err.Error(), "use a disk of at least") {
					t.Fatalf("Plan(%d MiB) = %+v, %v; want an error naming the smallest disk", tc.volume/MiB, b, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := b.Quota / MiB; got != tc.wantQuota {
				t.Errorf("quota %d MiB, want %d MiB", got, tc.wantQuota)
			}
			if used := b.Node + b.Margin + b.Ballast + b.WAL + b.Defrag + b.Quota; used > b.Volume {
				t.Errorf("the budget shares out %d MiB of a %d MiB volume", used/MiB, b.Volume/MiB)
			}
			if b.Reserve() >= b.Margin || b.Reserve() <= 0 {
				t.Errorf("reserve %d outside the margin %d", b.Reserve(), b.Margin)
			}
			if worst := max(int64(b.Snapshots)*MaxRequestBytes+2*b.Segment, (WALFiles+1)*b.Segment); b.WAL < worst {
				t.Errorf("a WAL share of %d MiB, under the log's worst case of %d MiB", b.WAL/MiB, worst/MiB)
			}
			if b.Snapshots < 100 || b.Snapshots > 10000 {
				t.Errorf("a snapshot every %d entries", b.Snapshots)
			}
		})
	}
}

func TestMinVolume(t *testing.T) {
	size := minVolume()
	if _, err := Plan(size); err != nil {
		t.Fatalf("minVolume %d MiB: %v", size/MiB, err)
	}
	if _, err := Plan(size - 16*MiB); err == nil {
		t.Fatalf("minVolume %d MiB is not the smallest", size/MiB)
	}
}
