package logs

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Zap is a zap logger writing to log the lines of min and above: how a
// library that logs through zap (an embedded etcd member) reaches the
// runtime's own log, one line for one line, its fields kept.
func Zap(log *slog.Logger, min slog.Level) *zap.Logger {
	return zap.New(&zapCore{log: Or(log), min: min})
}

type zapCore struct {
	log    *slog.Logger
	min    slog.Level
	fields []zapcore.Field // from With, shared: copied before appending
}

func slogLevel(l zapcore.Level) slog.Level {
	switch {
	case l >= zapcore.ErrorLevel:
		return slog.LevelError
	case l == zapcore.WarnLevel:
		return slog.LevelWarn
	case l == zapcore.InfoLevel:
		return slog.LevelInfo
	}
	return slog.LevelDebug
}

func (c *zapCore) Enabled(l zapcore.Level) bool {
	level := slogLevel(l)
	return level >= c.min && c.log.Enabled(context.Background(), level)
}

func (c *zapCore) With(fields []zapcore.Field) zapcore.Core {
	return &zapCore{log: c.log, min: c.min, fields: append(slices.Clip(c.fields), fields...)}
}

func (c *zapCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *zapCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range append(slices.Clip(c.fields), fields...) {
		f.AddTo(enc)
	}
	args := make([]any, 0, 2*len(enc.Fields)+2)
	if e.LoggerName != "" {
		args = append(args, "logger", e.LoggerName)
	}
	for _, k := range slices.Sorted(maps.Keys(enc.Fields)) {
		v := enc.Fields[k]
		if d, ok := v.(time.Duration); ok {
			v = d.String() // as zap's own encoders write it, not in ns
		}
		args = append(args, k, v)
	}
	c.log.Log(context.Background(), slogLevel(e.Level), e.Message, args...)
	return nil
}

func (c *zapCore) Sync() error { return nil }
