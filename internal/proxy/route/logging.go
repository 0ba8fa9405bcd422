package route

import (
	"context"
	"log/slog"
	"time"
)

// The proxy's log: one line per state change of a shard or of the
// federation (added, removed, DOWN and back, ejected and returned, ledger
// replays, assigned states and pools, pool weights, admission refusing
// and admitting, the registry watch), each naming the shard and its
// slot. What can repeat many times a second (cooling off after each
// RESOURCE_EXHAUSTED, the in-flight limit, overload flapping, a registry
// that keeps failing) goes through p.repeats: at most one line of a kind
// an interval, with the count of those left out.

// logShard writes one line about s: its id and slot, then args.
func (p *Core) logShard(level slog.Level, s *Shard, msg string, args ...any) {
	p.log.Log(context.Background(), level, msg, append([]any{"shard", s.ID, "slot", s.Slot}, args...)...)
}

// logShardRepeating is logShard for a line that can repeat many times a
// second: one of a kind (message and shard) an interval at most.
func (p *Core) logShardRepeating(level slog.Level, s *Shard, msg string, args ...any) {
	p.logShardAs(level, s, msg, msg, args...)
}

// logShardAs is logShardRepeating with the lines of one kind told apart
// from their message: a state that flaps logs both ways as one kind, so
// the line written last, or flushed, is the state the shard is in.
func (p *Core) logShardAs(level slog.Level, s *Shard, kind, msg string, args ...any) {
	p.repeats.Log(level, kind+"\x00"+s.ID, msg, append([]any{"shard", s.ID, "slot", s.Slot}, args...)...)
}

// logRepeating writes a line about the proxy itself (the registry it
// follows) that can repeat: one of a kind an interval at most.
func (p *Core) logRepeating(level slog.Level, msg string, args ...any) {
	p.repeats.Log(level, msg, msg, args...)
}

// flushLogs writes the counts of repeated lines every interval until the
// proxy stops; Close writes what is left.
func (p *Core) flushLogs() {
	t := time.NewTicker(p.repeats.Every())
	defer t.Stop()
	for {
		select {
		case <-p.stopping.Done():
			return
		case <-t.C:
			p.repeats.Flush()
		}
	}
}

// logDuration renders a duration for a log line, the same in text and JSON
// ("30s", where JSON would write nanoseconds).
func logDuration(d time.Duration) string { return d.Round(time.Millisecond).String() }
