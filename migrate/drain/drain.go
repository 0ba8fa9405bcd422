// Package drain takes shards out of placement and follows them until
// they hold nothing: DRAINING in the registry, then each shard's backlog
// read until it is empty twice in a row, then OUT_OF_SERVICE; a shard
// that stops moving is reported stuck, with what holds it. Like kubectl's
// drain.Helper it knows nothing of cobra and reports through a callback.
// It links no runtime: it reads the registry through an interface its
// client satisfies and the backlog through internal/backlog.
package drain

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/shardctl/shardctl/internal/backlog"
	"github.com/shardctl/shardctl/internal/human"
	"github.com/shardctl/shardctl/internal/keyslot"
	"github.com/shardctl/shardctl/internal/registry/registryapi"
	"github.com/shardctl/shardctl/internal/shardconn"
	"github.com/shardctl/shardctl/internal/signals"
)

// Registry is what a drain needs of the registry (registryclient.Client has it).
type Registry interface {
	Shards(ctx context.Context, app string) ([]registryapi.Shard, error)
	Shard(ctx context.Context, app, id string) (registryapi.Shard, error)
	SetState(ctx context.Context, app, id, state string) (registryapi.Shard, error)
}

// Drain defaults.
const (
	DefaultPoll       = 5 * time.Second
	DefaultStuckAfter = 5
	// emptyPolls is how many polls in a row a shard must read empty: one
	// reading may fall between a record's append and its processing.
	emptyPolls = 2
	// etaPolls is how many polls the drain rate is read over.
	etaPolls = 5
)

// Helper takes shards out of placement and follows them until they hold
// nothing.
type Helper struct {
	Registry Registry
	App      string
	Backlog  backlog.Reader
	// Poll is how often each shard is read; StuckAfter how many polls
	// without progress make it stuck.
	Poll       time.Duration
	StuckAfter int
	// OnEvent is told everything the drain does, in order.
	OnEvent func(Event)
	// Shards is how a stuck shard's REST API is asked what it still runs:
	// the CA and the credential its metadata names (nil: the system's
	// roots, no credential).
	Shards *shardconn.Access
}

// Event kinds.
const (
	EventDraining = "draining" // set DRAINING in the registry
	EventProgress = "progress" // one poll of one shard
	EventStuck    = "stuck"    // no progress for StuckAfter polls: what blocks it
	EventEmpty    = "empty"    // empty for two polls, set OUT_OF_SERVICE
)

// Event is one thing a drain did or saw.
type Event struct {
	At    time.Time `json:"at"`
	Event string    `json:"event"`
	Shard string    `json:"shard"`
	State string    `json:"state"` // in the registry, after the event
	// Was is the state before a change (draining).
	Was     string           `json:"was,omitempty"`
	Backlog *backlog.Backlog `json:"backlog,omitempty"`
	// Done is the share of the backlog the drain has cleared since it
	// began following the shard (0-1).
	Done float64 `json:"done"`
	// ETASeconds is when it will be empty at the pace it empties now;
	// null when it is not emptying. ETA says it for a person: a range
	// when the pace is uncertain.
	ETASeconds *float64 `json:"etaSeconds"`
	ETA        string   `json:"eta,omitempty"`
	// StalledPolls is how many polls in a row it has not progressed.
	StalledPolls int      `json:"stalledPolls"`
	Blockers     []string `json:"blockers,omitempty"`
	// Waiting names the oldest instances a stuck shard still runs, and
	// WaitingTotal counts them all, when its registration names its REST
	// API (a stuck event only).
	Waiting      []Waiting `json:"waiting,omitempty"`
	WaitingTotal int64     `json:"waitingTotal,omitempty"`
}

// Line is the event as one line for a person.
func (e Event) Line() string {
	switch e.Event {
	case EventDraining:
		return fmt.Sprintf("shard %s DRAINING (was %s): no new instances go there", e.Shard, e.Was)
	case EventEmpty:
		return fmt.Sprintf("shard %s: empty for %d polls in a row; set %s", e.Shard, emptyPolls, e.State)
	case EventStuck:
		return fmt.Sprintf("shard %s: no progress for %d polls; waiting on: %s", e.Shard, e.StalledPolls, strings.Join(e.Blockers, "; "))
	}
	line := fmt.Sprintf("shard %s: %s", e.Shard, e.Backlog.Summary())
	switch {
	case e.Backlog.Empty():
		line += ", empty"
	case e.ETA != "":
		line += ", " + e.ETA + " left"
	}
	return line
}

// NotEmptyError is a drain that ended (timed out, or interrupted) before
// every shard was empty. The shards stay DRAINING.
type NotEmptyError struct {
	Cause error // context.DeadlineExceeded or context.Canceled
	Left  []Event
}

func (e *NotEmptyError) Error() string {
	var parts []string
	for _, l := range e.Left {
		parts = append(parts, fmt.Sprintf("%s still %s with %s", l.Shard, l.State, l.Backlog.Summary()))
	}
	what := "interrupted"
	if errors.Is(e.Cause, context.DeadlineExceeded) {
		what = "timed out"
	}
	return what + ": " + strings.Join(parts, "; ")
}

func (e *NotEmptyError) Unwrap() error { return e.Cause }

func (d *Helper) emit(e Event) {
	if d.OnEvent != nil {
		d.OnEvent(e)
	}
}

// Lookup finds every shard, or says which are unknown; nothing changes.
func Lookup(ctx context.Context, r Registry, app string, ids []string) ([]registryapi.Shard, error) {
	all, err := r.Shards(ctx, app)
	if err != nil {
		return nil, err
	}
	byID := map[string]registryapi.Shard{}
	for _, s := range all {
		byID[s.ID] = s
	}
	var out []registryapi.Shard
	var unknown []string
	for _, id := range ids {
		s, ok := byID[id]
		if !ok {
			unknown = append(unknown, id)
			continue
		}
		out = append(out, s)
	}
	if len(unknown) > 0 {
		known := slices.Sorted(maps.Keys(byID))
		return nil, fmt.Errorf("%w: no shard %s in %s (it has: %s)", registryapi.ErrNotFound, strings.Join(unknown, ", "), app, strings.Join(known, ", "))
	}
	return out, nil
}

// Begin sets every shard DRAINING, after checking that all exist.
func (d *Helper) Begin(ctx context.Context, ids []string) ([]registryapi.Shard, error) {
	shards, err := Lookup(ctx, d.Registry, d.App, ids)
	if err != nil {
		return nil, err
	}
	for i, s := range shards {
		was := s.State
		if s.State != registryapi.StateDraining {
			if shards[i], err = d.Registry.SetState(ctx, d.App, s.ID, registryapi.StateDraining); err != nil {
				return nil, fmt.Errorf("set %s DRAINING: %w", s.ID, err)
			}
		}
		d.emit(Event{At: time.Now(), Event: EventDraining, Shard: s.ID, State: registryapi.StateDraining, Was: was})
	}
	return shards, nil
}

// follow is what the drain knows of one shard.
type follow struct {
	shard   registryapi.Shard
	first   float64        // backlog size at the first reading
	history signals.Series // backlog size per poll
	last    backlog.Backlog
	// stalled counts polls without progress; best is the smallest size
	// seen, progress being a new best.
	stalled     int
	best        float64
	empty       int
	activatedAt []map[string]float64 // jobs activated, per poll
	done        bool
}

// size is one number for how much a shard holds, for progress and ETA.
func size(b backlog.Backlog) float64 {
	s := b.InFlight + b.Lag + b.Incidents
	if b.ExportLag != nil {
		s += *b.ExportLag
	}
	return s
}

// Wait follows DRAINING shards until each reads empty for two polls in a
// row and sets each OUT_OF_SERVICE then. When ctx ends first it returns a
// *NotEmptyError naming what is left; those shards stay DRAINING.
func (d *Helper) Wait(ctx context.Context, shards []registryapi.Shard) error {
	poll, stuckAfter := d.Poll, d.StuckAfter
	if poll <= 0 {
		poll = DefaultPoll
	}
	if stuckAfter <= 0 {
		stuckAfter = DefaultStuckAfter
	}
	follows := make([]*follow, len(shards))
	for i, s := range shards {
		follows[i] = &follow{shard: s, best: -1, last: backlog.Backlog{Shard: s.ID, Error: "not read yet"}}
	}
	tick := time.NewTicker(poll)
	defer tick.Stop()
	for {
		left := 0
		for _, f := range follows {
			if f.done {
				continue
			}
			if err := d.pollOnce(ctx, f, stuckAfter); err != nil {
				return err
			}
			if ctx.Err() != nil {
				break
			}
			if !f.done {
				left++
			}
		}
		if left == 0 && ctx.Err() == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			e := &NotEmptyError{Cause: ctx.Err()}
			for _, f := range follows {
				if !f.done {
					b := f.last
					e.Left = append(e.Left, Event{At: time.Now(), Event: EventProgress, Shard: f.shard.ID, State: registryapi.StateDraining, Backlog: &b})
				}
			}
			return e
		case <-tick.C:
		}
	}
}

// pollOnce reads one shard and reports it; an empty one is set
// OUT_OF_SERVICE on its second empty poll.
func (d *Helper) pollOnce(ctx context.Context, f *follow, stuckAfter int) error {
	b := d.Backlog.Read(ctx, backlog.Target{Shard: f.shard.ID, MetricsURL: f.shard.Metadata[registryapi.MetaMetrics]})
	if ctx.Err() != nil {
		return nil // a reading cut short by the end of the wait says nothing
	}
	f.last = b
	n := size(b)
	ev := Event{At: b.At, Event: EventProgress, Shard: f.shard.ID, State: registryapi.StateDraining, Backlog: &b}
	if b.Known() {
		if f.history == nil {
			f.first = n
		}
		f.history = append(f.history, signals.Point{T: b.At, V: n})
		if len(f.history) > etaPolls {
			f.history = f.history[1:]
		}
		if f.first > 0 {
			ev.Done = min(1, max(0, 1-n/f.first))
		}
		// The pace it empties at over the last few polls, read from
		// where the fall began, as the advisor reads a queue's.
		if e, ok := signals.EmptyIn(f.history, b.At, b.At.Sub(f.history[0].T)); ok {
			ev.ETASeconds, ev.ETA = &e.Seconds, signals.When(e, signals.DefaultThresholds())
		}
	}
	switch {
	case b.Empty():
		f.empty++
		f.stalled = 0
		ev.Done = 1
	case b.Known() && (f.best < 0 || n < f.best):
		f.empty, f.stalled, f.best = 0, 0, n
	default:
		f.empty = 0
		f.stalled++
	}
	f.activatedAt = append(f.activatedAt, b.Activated)
	if len(f.activatedAt) > stuckAfter+1 {
		f.activatedAt = f.activatedAt[1:]
	}
	ev.StalledPolls = f.stalled
	d.emit(ev)
	if f.stalled >= stuckAfter && f.stalled%stuckAfter == 0 {
		stuck := ev
		stuck.Event = EventStuck
		stuck.Blockers = d.blockers(ctx, f)
		list, total, asked, err := waiting(ctx, d.Shards, f.shard)
		switch {
		case err != nil:
			stuck.Blockers = append(stuck.Blockers, "its running instances cannot be listed through its REST API: "+err.Error())
		case asked && total > 0:
			stuck.Waiting, stuck.WaitingTotal = list, total
			stuck.Blockers = append([]string{waitingLine(list, total)}, stuck.Blockers...)
		}
		d.emit(stuck)
	}
	if f.empty >= emptyPolls {
		s, err := d.Registry.SetState(ctx, d.App, f.shard.ID, registryapi.StateOutOfService)
		if err != nil {
			return fmt.Errorf("%s is empty, and setting it OUT_OF_SERVICE failed: %w", f.shard.ID, err)
		}
		f.done = true
		d.emit(Event{At: time.Now(), Event: EventEmpty, Shard: f.shard.ID, State: s.State, Backlog: &b, Done: 1})
	}
	return nil
}

// blockers say what a stuck shard waits for, most likely first.
func (d *Helper) blockers(ctx context.Context, f *follow) []string {
	b := f.last
	var out []string
	if b.Error != "" {
		return []string{"its metrics cannot be read: " + b.Error}
	}
	if len(b.Missing) > 0 {
		out = append(out, "no data for "+strings.Join(b.Missing, ", ")+" (missing data never counts as empty)")
	}
	if b.Incidents > 0 {
		what := fmt.Sprintf("%s open", human.Plural(b.Incidents, "incident"))
		if l, ok := d.Backlog.(backlog.IncidentLister); ok {
			if keys, err := l.IncidentKeys(ctx, backlog.Target{Shard: f.shard.ID, MetricsURL: f.shard.Metadata[registryapi.MetaMetrics]}); err == nil && len(keys) > 0 {
				// As a client of the proxy knows them: with the shard's slot.
				for i, k := range keys {
					keys[i] = keyslot.With(k, f.shard.Slot)
				}
				what += fmt.Sprintf(" (keys %s)", joinKeys(keys))
			}
		}
		out = append(out, what+": resolve them (zbctl resolve incident KEY) or cancel their instances")
	}
	if b.Lag > 0 {
		out = append(out, fmt.Sprintf("processing is not moving: %.0f records committed and not processed (is the shard paused or down?)", b.Lag))
	}
	if b.ExportLag != nil && *b.ExportLag > 0 {
		out = append(out, fmt.Sprintf("an exporter is %.0f records behind", *b.ExportLag))
	}
	oldest := f.activatedAt[0]
	for _, typ := range slices.Sorted(maps.Keys(b.OpenJobs)) {
		if b.Activated[typ] == oldest[typ] {
			out = append(out, fmt.Sprintf("%s of type %q open and none activated for %d polls: no worker takes %q?", human.Plural(b.OpenJobs[typ], "job"), typ, f.stalled, typ))
		} else {
			out = append(out, fmt.Sprintf("%s of type %q open: workers take them and do not complete them (failing?)", human.Plural(b.OpenJobs[typ], "job"), typ))
		}
	}
	if b.InFlight > 0 && b.Jobs() == 0 && b.Incidents == 0 {
		out = append(out, fmt.Sprintf("%s in flight with no job open: waiting for a message, a timer or a signal", human.Plural(b.InFlight, "instance")))
	}
	if b.Buffered > 0 && b.InFlight > 0 {
		out = append(out, fmt.Sprintf("%s buffered until their TTL ends, for instances not yet waiting for them", human.Plural(b.Buffered, "message")))
	}
	if len(out) == 0 {
		out = append(out, "nothing the metrics show moves: "+b.Summary())
	}
	return out
}

func joinKeys(keys []int64) string {
	var s []string
	for i, k := range keys {
		if i == 5 {
			s = append(s, fmt.Sprintf("and %d more", len(keys)-5))
			break
		}
		s = append(s, fmt.Sprint(k))
	}
	return strings.Join(s, ", ")
}

// Undrain sets every shard UP again, after checking that all exist.
func Undrain(ctx context.Context, r Registry, app string, ids []string) ([]registryapi.Shard, error) {
	shards, err := Lookup(ctx, r, app, ids)
	if err != nil {
		return nil, err
	}
	for i, s := range shards {
		if shards[i], err = r.SetState(ctx, app, s.ID, registryapi.StateUp); err != nil {
			return nil, fmt.Errorf("set %s UP: %w", s.ID, err)
		}
	}
	return shards, nil
}
