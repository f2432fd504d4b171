package etcdlog

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"

	"go.uber.org/zap/zapcore"
)

// counting is a slog handler that counts the records it is given.
type counting struct{ n *atomic.Int64 }

func (c counting) Enabled(context.Context, slog.Level) bool  { return true }
func (c counting) Handle(context.Context, slog.Record) error { c.n.Add(1); return nil }
func (c counting) WithAttrs([]slog.Attr) slog.Handler        { return c }
func (c counting) WithGroup(string) slog.Handler             { return c }

// TestSamples: a warning etcd repeats in a tight loop reaches the
// node's log a bounded number of times a second; distinct warnings all
// do.
func TestSamples(t *testing.T) {
	for _, tc := range []struct {
		name     string
		messages int // distinct messages, each repeated
		repeats  int
		max      int64
		min      int64
	}{
		{"one warning in a loop", 1, 5000, int64(sampleFirst + 5000/sampleThereafter), int64(sampleFirst)},
		{"distinct warnings", 50, 1, 50, 50},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var n atomic.Int64
			lg := New(slog.New(counting{&n}), zapcore.InfoLevel)
			for i := range tc.messages {
				for range tc.repeats {
					lg.Warn("failed to publish local member to cluster through raft " + string(rune('A'+i)))
				}
			}
			if got := n.Load(); got < tc.min || got > tc.max {
				t.Errorf("%d entries reached the log, want %d to %d", got, tc.min, tc.max)
			}
		})
	}
}
