package console

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// ServiceKey is the attribute that names the service a record comes from.
// The handler prints it as a prefix instead of as a key=value pair.
const ServiceKey = "service"

// Handler is a slog.Handler that prints one line a record:
//
//	[   12.345678] borough: <service>: <message> key=value ...
//
// The time is seconds since boot (CLOCK_BOOTTIME), as the kernel prints it.
// Records below Level are not printed. A handler with a sink (WithSink)
// also gives it every record at the sink's level and above, formatted the
// same way: the node's log tree keeps more than the console shows.
type Handler struct {
	w         io.Writer
	mu        *sync.Mutex
	level     slog.Leveler
	sink      Sink
	sinkLevel slog.Level
	service   string
	attrs     string
	group     string
	since     func() time.Duration
}

// Record is a formatted record, for a Sink.
type Record struct {
	Time      time.Time
	SinceBoot time.Duration
	// Service is the record's service, "" for the node's own records.
	Service string
	Level   slog.Level
	// Text is the message and its attributes, as the console prints them.
	Text string
}

// Sink takes every record of a handler at its level and above.
type Sink func(Record)

// NewHandler returns a Handler writing to w at level Info and above.
func NewHandler(w io.Writer) *Handler {
	return &Handler{w: w, mu: new(sync.Mutex), level: slog.LevelInfo, since: sinceBoot}
}

// sinceBoot reads CLOCK_BOOTTIME, which starts at zero when the kernel does.
func sinceBoot() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// WithSink returns a handler that also gives sink every record at level
// and above.
func (h *Handler) WithSink(sink Sink, level slog.Level) *Handler {
	c := *h
	c.sink, c.sinkLevel = sink, level
	return &c
}

// Enabled implements slog.Handler.
func (h *Handler) Enabled(_ context.Context, l slog.Level) bool {
	return l >= h.level.Level() || (h.sink != nil && l >= h.sinkLevel)
}

// Handle implements slog.Handler.
func (h *Handler) Handle(_ context.Context, r slog.Record) error {
	since := h.since()
	var b strings.Builder
	switch {
	case r.Level >= slog.LevelError:
		b.WriteString("error: ")
	case r.Level >= slog.LevelWarn:
		b.WriteString("warning: ")
	}
	b.WriteString(r.Message)
	b.WriteString(h.attrs)
	r.Attrs(func(a slog.Attr) bool {
		writeAttr(&b, h.group, a)
		return true
	})
	text := b.String()
	if h.sink != nil && r.Level >= h.sinkLevel {
		h.sink(Record{Time: r.Time, SinceBoot: since, Service: h.service, Level: r.Level, Text: text})
	}
	if r.Level < h.level.Level() {
		return nil
	}
	prefix := fmt.Sprintf("[%12.6f] borough: ", since.Seconds())
	if h.service != "" {
		prefix += h.service + ": "
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	_, err := io.WriteString(h.w, prefix+text+"\n")
	return err
}

// WithAttrs implements slog.Handler.
func (h *Handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *h
	var b strings.Builder
	for _, a := range attrs {
		if a.Key == ServiceKey && h.group == "" {
			c.service = joinService(c.service, a.Value.String())
			continue
		}
		writeAttr(&b, h.group, a)
	}
	c.attrs += b.String()
	return &c
}

// WithGroup implements slog.Handler.
func (h *Handler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	c := *h
	c.group = h.group + name + "."
	return &c
}

func joinService(parent, child string) string {
	if parent == "" {
		return child
	}
	return parent + "/" + child
}

func writeAttr(b *strings.Builder, group string, a slog.Attr) {
	a.Value = a.Value.Resolve()
	if a.Equal(slog.Attr{}) {
		return
	}
	if a.Value.Kind() == slog.KindGroup {
		for _, ga := range a.Value.Group() {
			writeAttr(b, group+a.Key+".", ga)
		}
		return
	}
	v := a.Value.String()
	if v == "" || strings.ContainsAny(v, " \t\n\"=") {
		v = strconv.Quote(v)
	}
	fmt.Fprintf(b, " %s%s=%s", group, a.Key, v)
}
