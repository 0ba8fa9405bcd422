package logs

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"
)

// RepeatEvery is how often a line that repeats is written at most, by
// default.
const RepeatEvery = 10 * time.Second

// Suppressed is the field that counts the lines of a kind not written
// since the one before.
const Suppressed = "suppressed"

// Repeats writes lines that can repeat many times a second (a shard
// cooling off after each RESOURCE_EXHAUSTED, a watch that keeps failing)
// without flooding the log. Each line has a kind (its key, e.g. the
// message and the shard): the first line of a kind is written at once;
// the others within Every of it are counted, not written; the next one
// after that is written with the count (field "suppressed"). Flush, which
// the owner calls every Every, writes the latest line of a kind that was
// suppressed and has been quiet since, so a burst that ends is still
// counted, and its last state shown, within two intervals.
type Repeats struct {
	log   *slog.Logger
	every time.Duration
	now   func() time.Time

	mu    sync.Mutex
	kinds map[string]*kind
}

// kind is what Repeats knows of one key.
type kind struct {
	written    time.Time // when a line of this kind was last written
	suppressed int       // lines not written since
	last       line      // the latest of them
}

type line struct {
	level  slog.Level
	msg    string
	args   []any
	argsFn func() []any // made when written, instead of args
}

// NewRepeats writes to log at most one line of a kind every every
// (RepeatEvery when 0), reading the time from now (time.Now when nil).
func NewRepeats(log *slog.Logger, every time.Duration, now func() time.Time) *Repeats {
	if every <= 0 {
		every = RepeatEvery
	}
	if now == nil {
		now = time.Now
	}
	return &Repeats{log: Or(log), every: every, now: now, kinds: map[string]*kind{}}
}

// Every is the interval the owner calls Flush at.
func (r *Repeats) Every() time.Duration { return r.every }

// Log writes a line of kind key at level, or counts it when a line of
// that kind was written less than Every ago.
func (r *Repeats) Log(level slog.Level, key, msg string, args ...any) {
	r.log1(key, line{level: level, msg: msg, args: args})
}

// LogFunc is Log with the line's fields made only if it is written: a
// kind that comes thousands of times a second costs a count each.
func (r *Repeats) LogFunc(level slog.Level, key, msg string, args func() []any) {
	r.log1(key, line{level: level, msg: msg, argsFn: args})
}

func (r *Repeats) log1(key string, l line) {
	if !r.log.Enabled(context.Background(), l.level) {
		return
	}
	now := r.now()
	r.mu.Lock()
	k := r.kinds[key]
	if k == nil {
		k = &kind{}
		r.kinds[key] = k
	}
	if !k.written.IsZero() && now.Sub(k.written) < r.every {
		k.suppressed++
		k.last = l
		r.mu.Unlock()
		return
	}
	n := k.suppressed
	k.written, k.suppressed, k.last = now, 0, line{}
	r.mu.Unlock()
	r.write(l, n)
}

// Flush writes, for each kind with lines suppressed and none written for
// Every, the latest of them with the count, and forgets the kinds that
// were quiet as long.
func (r *Repeats) Flush() { r.flush(false) }

// FlushAll writes the latest suppressed line of every kind now, whatever
// the time: when the owner stops.
func (r *Repeats) FlushAll() { r.flush(true) }

func (r *Repeats) flush(all bool) {
	now := r.now()
	type pending struct {
		l line
		n int
	}
	var out []pending
	r.mu.Lock()
	for _, key := range slices.Sorted(maps.Keys(r.kinds)) { // the same order every time
		k := r.kinds[key]
		due := now.Sub(k.written) >= r.every
		switch {
		case k.suppressed > 0 && (due || all):
			out = append(out, pending{k.last, k.suppressed})
			k.written, k.suppressed, k.last = now, 0, line{}
		case k.suppressed == 0 && due:
			delete(r.kinds, key) // its next line is written at once anyway
		}
	}
	r.mu.Unlock()
	for _, p := range out {
		r.write(p.l, p.n)
	}
}

// write writes one line, outside the lock: a handler may block on its
// writer.
func (r *Repeats) write(l line, suppressed int) {
	args := l.args
	if l.argsFn != nil {
		args = l.argsFn()
	}
	if suppressed > 0 {
		args = append(args[:len(args):len(args)], Suppressed, suppressed)
	}
	r.log.Log(context.Background(), l.level, l.msg, args...)
}
