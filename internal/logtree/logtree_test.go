package logtree

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// fill appends n entries to service, one second apart from at.
func fill(tr *Tree, service string, n int, at time.Time) {
	for i := range n {
		tr.Append(Entry{Time: at.Add(time.Duration(i) * time.Second), Service: service, Text: fmt.Sprintf("%s %d", service, i)})
	}
}

func texts(es []Entry) string {
	var s []string
	for _, e := range es {
		s = append(s, e.Text)
	}
	return strings.Join(s, ",")
}

func TestRead(t *testing.T) {
	tr := New(3, 1<<20)
	fill(tr, "etcd", 5, t0)
	fill(tr, "cluster", 2, t0)
	fill(tr, "cluster/etcd", 1, t0.Add(time.Hour))
	fill(tr, "clusterkey", 1, t0)
	for _, tc := range []struct {
		name   string
		filter Filter
		want   string
	}{
		{"every service, a ring each", Filter{}, "etcd 2,etcd 3,etcd 4,cluster 0,cluster 1,cluster/etcd 0,clusterkey 0"},
		{"a service and those under it", Filter{Service: "cluster"}, "cluster 0,cluster 1,cluster/etcd 0"},
		{"a service under another", Filter{Service: "cluster/etcd"}, "cluster/etcd 0"},
		{"the end of a service's name", Filter{Service: "etcd"}, "etcd 2,etcd 3,etcd 4,cluster/etcd 0"},
		{"not a whole name", Filter{Service: "luster"}, ""},
		{"no such service", Filter{Service: "storage"}, ""},
		{"since", Filter{Since: t0.Add(3 * time.Second)}, "etcd 3,etcd 4,cluster/etcd 0"},
		{"after a sequence number", Filter{AfterSeq: 7}, "cluster/etcd 0,clusterkey 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := texts(tr.Read(tc.filter)); got != tc.want {
				t.Errorf("Read = %q, want %q", got, tc.want)
			}
		})
	}
	if got := strings.Join(tr.Services(), ","); got != "cluster,cluster/etcd,clusterkey,etcd" {
		t.Errorf("Services = %s", got)
	}
}

func TestByteBound(t *testing.T) {
	tr := New(100, 25)
	for _, text := range []string{"ten bytes.", "ten bytes!", "ten bytes?", strings.Repeat("z", 40)} {
		tr.Append(Entry{Service: "s", Text: text})
	}
	if got := texts(tr.Read(Filter{})); got != strings.Repeat("z", 40) {
		t.Errorf("after a line over the bound, the ring holds %q; want that line alone", got)
	}
	tr.Append(Entry{Service: "s", Text: "ten bytes."})
	tr.Append(Entry{Service: "s", Text: "ten bytes!"})
	if got := texts(tr.Read(Filter{})); got != "ten bytes.,ten bytes!" {
		t.Errorf("ring = %q, want the last two lines (20 of 25 bytes)", got)
	}
}

func TestMaxText(t *testing.T) {
	tr := New(1, 1<<20)
	tr.Append(Entry{Service: "s", Text: strings.Repeat("x", MaxText+10)})
	if got := tr.Read(Filter{})[0].Text; len(got) != MaxText+len(" [cut]") || !strings.HasSuffix(got, " [cut]") {
		t.Errorf("a long text was kept as %d bytes", len(got))
	}
}

func TestFollow(t *testing.T) {
	tr := New(10, 1<<20)
	fill(tr, "storage", 2, t0)
	sub := tr.Follow(Filter{Service: "storage"})
	fill(tr, "etcd", 1, t0)
	fill(tr, "storage", 1, t0.Add(time.Minute))
	if got := texts(sub.Backlog); got != "storage 0,storage 1" {
		t.Errorf("backlog = %q", got)
	}
	if e := <-sub.C; e.Text != "storage 0" || e.Seq != 4 {
		t.Errorf("followed %+v, want storage 0 with seq 4", e)
	}
	fill(tr, "storage", 2, t0.Add(time.Hour))
	if got := texts(sub.Waiting()); got != "storage 0,storage 1" {
		t.Errorf("waiting = %q, want the two new entries", got)
	}
	if got := sub.Waiting(); len(got) != 0 {
		t.Errorf("waiting again = %v, want nothing", got)
	}
	sub.Close()
	if _, ok := <-sub.C; ok {
		t.Error("C still open after Close")
	}
	if sub.Lagged() {
		t.Error("a closed subscription reports it lagged")
	}
	sub.Close()
}

func TestFollowLag(t *testing.T) {
	tr := New(10, 1<<20)
	sub := tr.Follow(Filter{})
	fill(tr, "etcd", followBuffer+1, t0)
	n := 0
	for range sub.C {
		n++
	}
	if n != followBuffer || !sub.Lagged() {
		t.Errorf("a follower %d behind got %d entries, lagged %v; want %d and lagged", followBuffer+1, n, sub.Lagged(), followBuffer)
	}
	fill(tr, "etcd", 1, t0)
}

// runJournal runs a journal over tr while more logs, and returns the
// journal once it has stopped: Run writes what the tree holds when its
// context ends, whether logged before it followed the tree (its backlog)
// or after (waiting), so no wait is needed for the last entry.
func runJournal(t *testing.T, dir string, tr *Tree, maxBytes int64, more func()) *Journal {
	t.Helper()
	j := &Journal{Dir: dir, Keep: 3, MaxBytes: maxBytes}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- j.Run(ctx, tr) }()
	if more != nil {
		more()
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	return j
}

func TestJournal(t *testing.T) {
	dir := t.TempDir()
	for boot := 1; boot <= 4; boot++ {
		tr := New(100, 1<<20)
		fill(tr, "node", boot, t0)
		j := runJournal(t, dir, tr, 1<<20, func() { fill(tr, "etcd", 1, t0) })
		prev, err := j.Boot(-1)
		switch {
		case boot == 1 && err == nil:
			t.Error("the first boot read a boot before it")
		case boot > 1 && err != nil:
			t.Fatal(err)
		case boot > 1 && len(prev) != boot:
			t.Errorf("boot %d read %d entries of boot %d, want %d", boot, len(prev), boot-1, boot)
		}
	}
	files, _ := filepath.Glob(filepath.Join(dir, "boot-*.jsonl"))
	if want := []string{"boot-000002.jsonl", "boot-000003.jsonl", "boot-000004.jsonl"}; fmt.Sprint(base(files)) != fmt.Sprint(want) {
		t.Errorf("journal files %v, want %v", base(files), want)
	}
}

// TestJournalRunAgain runs a boot's journal three times, as its service
// is restarted after failures: it goes on in the boot's one file, keeps
// the earlier boots', and writes each entry once.
func TestJournalRunAgain(t *testing.T) {
	dir := t.TempDir()
	for boot := 1; boot <= 2; boot++ {
		tr := New(100, 1<<20)
		fill(tr, "node", 1, t0)
		runJournal(t, dir, tr, 1<<20, nil)
	}
	tr := New(100, 1<<20)
	j := &Journal{Dir: dir, Keep: 3, MaxBytes: 1 << 20}
	for range 3 {
		fill(tr, "node", 2, t0)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- j.Run(ctx, tr) }()
		fill(tr, "etcd", 1, t0)
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	files, _ := filepath.Glob(filepath.Join(dir, "boot-*.jsonl"))
	if want := []string{"boot-000001.jsonl", "boot-000002.jsonl", "boot-000003.jsonl"}; fmt.Sprint(base(files)) != fmt.Sprint(want) {
		t.Errorf("journal files %v, want %v", base(files), want)
	}
	f, err := os.Open(filepath.Join(dir, "boot-000003.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got, err := readEntries(f.Name(), bufio.NewScanner(f))
	if err != nil || len(got) != 9 {
		t.Fatalf("this boot's journal holds %d entries, %v; want the 9 logged, each once", len(got), err)
	}
	for i, e := range got {
		if e.Seq != uint64(i+1) {
			t.Fatalf("entry %d has seq %d, want %d: an entry written twice or lost", i, e.Seq, i+1)
		}
	}
}

func base(paths []string) []string {
	var out []string
	for _, p := range paths {
		out = append(out, filepath.Base(p))
	}
	return out
}

func TestJournalBounds(t *testing.T) {
	for _, tc := range []struct {
		name     string
		entries  int
		maxBytes int64
		tear     bool
		back     int
		want     int
		wantLast string
		wantErr  string
	}{
		{name: "all of it", entries: 10, maxBytes: 1 << 20, back: -1, want: 10, wantLast: "node 9"},
		{name: "full", entries: 100, maxBytes: 2048, back: -1, want: 10, wantLast: "the journal of this boot is full (2048 bytes); later lines are in memory only"},
		{name: "torn last line", entries: 10, maxBytes: 1 << 20, tear: true, back: -1, want: 9, wantLast: "node 8"},
		{name: "too far back", entries: 1, maxBytes: 1 << 20, back: -3, wantErr: "has no such boot"},
		{name: "not back", entries: 1, maxBytes: 1 << 20, back: 0, wantErr: "earlier boots are -1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tr := New(1000, 1<<20)
			fill(tr, "node", tc.entries, t0)
			runJournal(t, dir, tr, tc.maxBytes, nil)
			if tc.tear {
				path := filepath.Join(dir, "boot-000001.jsonl")
				b, _ := os.ReadFile(path)
				os.WriteFile(path, b[:len(b)-10], 0o600)
			}
			j := runJournal(t, dir, New(1, 1<<20), 1<<20, nil)
			got, err := j.Boot(tc.back)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Boot(%d) = %v, want %q", tc.back, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != tc.want || got[len(got)-1].Text != tc.wantLast {
				t.Errorf("read %d entries ending %q, want %d ending %q", len(got), got[len(got)-1].Text, tc.want, tc.wantLast)
			}
			if tc.name == "full" && got[len(got)-1].Level != slog.LevelWarn {
				t.Error("the full journal's last line is not a warning")
			}
		})
	}
}

func TestJournalNotRunning(t *testing.T) {
	if _, err := (&Journal{Dir: t.TempDir(), Keep: 1}).Boot(-1); err == nil || !strings.Contains(err.Error(), "not running") {
		t.Errorf("Boot on a journal that never ran = %v", err)
	}
}
