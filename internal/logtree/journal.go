package logtree

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// syncEvery is how often the journal syncs what it wrote: a crash loses
// at most that much of its boot's log.
const syncEvery = time.Second

// Journal keeps the log of the last boots on the data volume, one file a
// boot (boot-NNNNNN.jsonl, one JSON Entry a line), so that the log of a
// boot that crashed can be read on the next. Each file stops growing at
// MaxBytes, with a last line saying so, and only the last Keep boots'
// files are kept: the journal can never fill the data volume.
type Journal struct {
	Dir      string
	Keep     int
	MaxBytes int64

	mu      sync.Mutex
	current int
	// last is the last entry Run wrote, for a Run that starts again after
	// a failure (a volume with no room left) to go on from it.
	last uint64
}

// Run writes the tree's entries to this boot's file, from the first it
// still holds, until ctx ends. Run again after a failure, it goes on in
// the same file from the last entry it wrote: a journal that fails over
// and over (a full volume) must not open a file a time and so push the
// earlier boots' logs out.
func (j *Journal) Run(ctx context.Context, t *Tree) error {
	f, size, err := j.open()
	if err != nil {
		return err
	}
	defer f.Close()
	w := &journalWriter{f: f, buf: bufio.NewWriter(f), max: j.MaxBytes, written: size}
	defer w.sync()
	last := j.last
	defer func() { j.last = last }()
	tick := time.NewTicker(syncEvery)
	defer tick.Stop()
	for {
		sub := t.Follow(Filter{AfterSeq: last})
		last, err = w.copy(ctx, sub, tick.C, last)
		sub.Close()
		if err != nil || ctx.Err() != nil {
			return err
		}
		w.note(fmt.Sprintf("the journal fell behind the log; lines after %d that the log no longer holds are missing", last))
	}
}

// copy writes sub's entries until ctx ends or sub lags, syncing on tick,
// and returns the last one's Seq.
func (w *journalWriter) copy(ctx context.Context, sub *Subscription, tick <-chan time.Time, last uint64) (uint64, error) {
	write := func(entries ...Entry) error {
		for _, e := range entries {
			if err := w.write(e); err != nil {
				return err
			}
			last = e.Seq
		}
		return nil
	}
	if err := write(sub.Backlog...); err != nil {
		return last, err
	}
	for {
		select {
		case <-ctx.Done():
			// What was logged up to the end, the node's last words
			// among it, is already waiting.
			return last, write(sub.Waiting()...)
		case <-tick:
			if err := w.sync(); err != nil {
				return last, err
			}
		case e, ok := <-sub.C:
			if !ok {
				return last, nil
			}
			if err := write(e); err != nil {
				return last, err
			}
		}
	}
}

// open makes this boot's file and removes the oldest beyond Keep, or,
// once this boot has its file, opens it again to append, and returns the
// file with its size.
func (j *Journal) open() (*os.File, int64, error) {
	j.mu.Lock()
	current := j.current
	j.mu.Unlock()
	if current != 0 {
		f, err := os.OpenFile(j.path(current), os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			return nil, 0, fmt.Errorf("log journal: %w", err)
		}
		st, err := f.Stat()
		if err != nil {
			f.Close()
			return nil, 0, fmt.Errorf("log journal: %w", err)
		}
		return f, st.Size(), nil
	}
	if err := os.MkdirAll(j.Dir, 0o700); err != nil {
		return nil, 0, fmt.Errorf("log journal: %w", err)
	}
	boots, err := j.boots()
	if err != nil {
		return nil, 0, err
	}
	next := 1
	if len(boots) > 0 {
		next = boots[len(boots)-1] + 1
	}
	for len(boots) >= j.Keep && len(boots) > 0 {
		if err := os.Remove(j.path(boots[0])); err != nil {
			return nil, 0, fmt.Errorf("log journal: %w", err)
		}
		boots = boots[1:]
	}
	f, err := os.OpenFile(j.path(next), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, 0, fmt.Errorf("log journal: %w", err)
	}
	j.mu.Lock()
	j.current = next
	j.mu.Unlock()
	return f, 0, nil
}

// Boot returns the entries of an earlier boot: -1 is the one before this
// one, -2 the one before that.
func (j *Journal) Boot(back int) ([]Entry, error) {
	j.mu.Lock()
	current := j.current
	j.mu.Unlock()
	if current == 0 {
		return nil, errors.New("the log journal is not running: the data volume is not mounted in this boot")
	}
	if back >= 0 {
		return nil, fmt.Errorf("boot %d: earlier boots are -1, -2, ...", back)
	}
	f, err := os.Open(j.path(current + back))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("boot %d: the journal keeps the last %d boots, and has no such boot", back, j.Keep)
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readEntries(f.Name(), bufio.NewScanner(f))
}

// readEntries reads a journal file; a torn last line (a crash while it
// was written) ends it.
func readEntries(name string, sc *bufio.Scanner) ([]Entry, error) {
	sc.Buffer(nil, 2*MaxText+1024)
	var out []Entry
	for sc.Scan() {
		var e Entry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			break
		}
		out = append(out, e)
	}
	if err := sc.Err(); err != nil {
		return out, fmt.Errorf("%s: %w", name, err)
	}
	return out, nil
}

func (j *Journal) path(boot int) string {
	return filepath.Join(j.Dir, fmt.Sprintf("boot-%06d.jsonl", boot))
}

// boots lists the boots in Dir, oldest first.
func (j *Journal) boots() ([]int, error) {
	des, err := os.ReadDir(j.Dir)
	if err != nil {
		return nil, fmt.Errorf("log journal: %w", err)
	}
	var boots []int
	for _, de := range des {
		num, ok := strings.CutPrefix(de.Name(), "boot-")
		num, ok2 := strings.CutSuffix(num, ".jsonl")
		if n, err := strconv.Atoi(num); ok && ok2 && err == nil {
			boots = append(boots, n)
		}
	}
	slices.Sort(boots)
	return boots, nil
}

// journalWriter writes entries up to max bytes.
type journalWriter struct {
	f       *os.File
	buf     *bufio.Writer
	written int64
	max     int64
	full    bool
	dirty   bool
}

func (w *journalWriter) write(e Entry) error {
	if w.full {
		return nil
	}
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	if w.written+int64(len(b))+1 > w.max-1024 {
		w.full = true
		e.Text, e.Service, e.Level = fmt.Sprintf("the journal of this boot is full (%d bytes); later lines are in memory only", w.max), "journal", slog.LevelWarn
		b, _ = json.Marshal(e)
	}
	w.written += int64(len(b)) + 1
	w.dirty = true
	_, err = w.buf.Write(append(b, '\n'))
	return err
}

func (w *journalWriter) note(text string) {
	_ = w.write(Entry{Time: time.Now(), Service: "journal", Level: slog.LevelWarn, Text: text})
}

func (w *journalWriter) sync() error {
	if !w.dirty {
		return nil
	}
	w.dirty = false
	if err := w.buf.Flush(); err != nil {
		return fmt.Errorf("log journal: %w", err)
	}
	return w.f.Sync()
}
