// Package etcdlog carries etcd's log, a zap logger, into a node's slog log,
// sampled.
//
// etcd logs through zap; a node logs through slog, to its consoles and its
// log tree. Bridging the two keeps etcd's entries in the node's one log,
// with its format and levels, rather than raw JSON on the console. The
// sampling is the other half: a loop in etcd that fails and says so each
// time can write tens of thousands of entries a second, and a serial
// console takes far fewer (docs/decisions.md, "etcd's log, sampled").
//
// The package is its own so that the benchmarks' floor, plain etcd in a
// VM (boottest/etcdfloor), logs through the very same bridge and sampling
// as a Borough member: a floor that logged more would be slower for it,
// and flatter Borough.
package etcdlog

import (
	"context"
	"log/slog"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// New returns a zap logger whose entries at minLevel and above go to
// log, so that etcd's log joins the node's instead of going raw to the
// console. etcd's info entries come at slog's debug level: there are many
// of them, and the node's log tree keeps them while the console, at info,
// does not print them.
//
// Entries are sampled, as etcd's own logger samples them (zap's
// sampler), but more tightly (sampleFirst, sampleThereafter), so that a
// loop in etcd that fails and says so each time cannot fill the serial
// console.
func New(log *slog.Logger, minLevel zapcore.Level) *zap.Logger {
	return zap.New(zapcore.NewSamplerWithOptions(&slogCore{log: log, min: minLevel},
		time.Second, sampleFirst, sampleThereafter))
}

// sampleFirst and sampleThereafter are how New samples: each second,
// the first sampleFirst entries with one message and level are written,
// then one in sampleThereafter. etcd's default logger writes the first 100
// and one in 100 after them; a serial console on a node's one CPU takes
// far fewer.
const (
	sampleFirst      = 10
	sampleThereafter = 1000
)

// slogCore is a zapcore.Core writing to a slog.Logger.
type slogCore struct {
	log    *slog.Logger
	min    zapcore.Level
	fields []zapcore.Field
}

func (c *slogCore) Enabled(l zapcore.Level) bool {
	return l >= c.min && c.log.Enabled(context.Background(), level(l))
}

func (c *slogCore) With(fields []zapcore.Field) zapcore.Core {
	return &slogCore{log: c.log, min: c.min, fields: append(append([]zapcore.Field{}, c.fields...), fields...)}
}

func (c *slogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *slogCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range append(append([]zapcore.Field{}, c.fields...), fields...) {
		f.AddTo(enc)
	}
	attrs := make([]slog.Attr, 0, len(enc.Fields))
	for k, v := range enc.Fields {
		attrs = append(attrs, slog.Any(k, v))
	}
	c.log.LogAttrs(context.Background(), level(e.Level), e.Message, attrs...)
	return nil
}

func (c *slogCore) Sync() error { return nil }

func level(l zapcore.Level) slog.Level {
	switch {
	case l >= zapcore.ErrorLevel:
		return slog.LevelError
	case l >= zapcore.WarnLevel:
		return slog.LevelWarn
	}
	return slog.LevelDebug
}
