package console

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"reflect"
	"testing"
	"time"
)

func TestHandler(t *testing.T) {
	for _, tc := range []struct {
		name string
		log  func(*slog.Logger)
		want string
	}{
		{"plain", func(l *slog.Logger) { l.Info("init started") },
			"[    1.500000] borough: init started\n"},
		{"attrs", func(l *slog.Logger) { l.Info("disk", "name", "vda", "size", 1024) },
			"[    1.500000] borough: disk name=vda size=1024\n"},
		{"quoted", func(l *slog.Logger) { l.Info("x", "err", errors.New("no such file")) },
			"[    1.500000] borough: x err=\"no such file\"\n"},
		{"service", func(l *slog.Logger) { l.With(ServiceKey, "power").Warn("no button") },
			"[    1.500000] borough: power: warning: no button\n"},
		{"nested service", func(l *slog.Logger) {
			l.With(ServiceKey, "a").With(ServiceKey, "b").Error("boom", "n", 1)
		}, "[    1.500000] borough: a/b: error: boom n=1\n"},
		{"group", func(l *slog.Logger) { l.WithGroup("g").Info("m", "k", "v") },
			"[    1.500000] borough: m g.k=v\n"},
		{"debug dropped", func(l *slog.Logger) { l.Debug("hidden") }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			h := NewHandler(&buf)
			h.since = func() time.Duration { return 1500 * time.Millisecond }
			tc.log(slog.New(h))
			if got := buf.String(); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestSink(t *testing.T) {
	for _, tc := range []struct {
		name    string
		log     func(*slog.Logger)
		console string
		sunk    []Record
	}{
		{"printed and sunk", func(l *slog.Logger) { l.With(ServiceKey, "storage").Warn("slow", "disk", "vda") },
			"[    1.500000] borough: storage: warning: slow disk=vda\n",
			[]Record{{SinceBoot: 1500 * time.Millisecond, Service: "storage", Level: slog.LevelWarn, Text: "warning: slow disk=vda"}}},
		{"debug sunk, not printed", func(l *slog.Logger) { l.With(ServiceKey, "etcd").Debug("applied", "index", 7) },
			"", []Record{{SinceBoot: 1500 * time.Millisecond, Service: "etcd", Level: slog.LevelDebug, Text: "applied index=7"}}},
		{"below the sink's level", func(l *slog.Logger) { l.Log(context.Background(), slog.LevelDebug-4, "trace") }, "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			var sunk []Record
			h := NewHandler(&buf)
			h.since = func() time.Duration { return 1500 * time.Millisecond }
			tc.log(slog.New(h.WithSink(func(r Record) {
				r.Time = time.Time{}
				sunk = append(sunk, r)
			}, slog.LevelDebug)))
			if got := buf.String(); got != tc.console {
				t.Errorf("console got %q, want %q", got, tc.console)
			}
			if !reflect.DeepEqual(sunk, tc.sunk) {
				t.Errorf("sink got %+v, want %+v", sunk, tc.sunk)
			}
		})
	}
}

func TestFanoutKeepsWritingPastAFailure(t *testing.T) {
	var a, b bytes.Buffer
	f := &fanout{ws: []io.Writer{&a, failing{}, &b}}
	if _, err := f.Write([]byte("line\n")); err != nil {
		t.Fatalf("Write: %v", err)
	}
	if a.String() != "line\n" || b.String() != "line\n" {
		t.Errorf("got %q and %q, want the line in both", a.String(), b.String())
	}
}

type failing struct{}

func (failing) Write([]byte) (int, error) { return 0, errors.New("broken console") }
