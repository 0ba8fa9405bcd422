// Package signalstest records the series of a run, so that what the
// advisor said during it can be checked again, offline and exactly, by a
// test that replays it.
// Tests only: no runtime or tool imports it outside its tests.
package signalstest

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"time"

	"github.com/shardctl/shardctl/internal/signals"
)

// Recording is one shard's series, each point as [seconds since Start,
// value], and what was measured of the run beside them.
type Recording struct {
	Start     time.Time    `json:"start"`
	Created   [][2]float64 `json:"created"`
	Completed [][2]float64 `json:"completed"`
	Queue     [][2]float64 `json:"queue"`
	Bounds    []float64    `json:"bounds"` // +Inf written as 0 (JSON has no infinity)
	// Latency is per step: its time (seconds since Start), then the count
	// in each bucket.
	Latency [][]float64 `json:"latency"`
	// Events are the run's moments by name: when a phase began, when a
	// debt was measured paid.
	Events []Event `json:"events"`
}

// Event is a named moment of a run.
type Event struct {
	At   time.Time `json:"at"`
	What string    `json:"what"`
}

// Record keeps a shard's series.
func Record(s signals.Shard, events []Event) (Recording, error) {
	if len(s.Queue) == 0 {
		return Recording{}, fmt.Errorf("nothing to record")
	}
	r := Recording{Start: s.Queue[0].T, Events: events}
	since := func(t time.Time) float64 { return round(t.Sub(r.Start).Seconds()) }
	for _, c := range []struct {
		from signals.Series
		to   *[][2]float64
	}{{s.Created, &r.Created}, {s.Completed, &r.Completed}, {s.Queue, &r.Queue}} {
		for _, p := range c.from {
			*c.to = append(*c.to, [2]float64{since(p.T), round(p.V)})
		}
	}
	for _, b := range s.Latency.Bounds {
		if math.IsInf(b, 1) {
			b = 0
		}
		r.Bounds = append(r.Bounds, b)
	}
	for i, row := range s.Latency.Counts {
		out := []float64{since(s.Latency.Times[i])}
		for _, c := range row {
			out = append(out, round(c))
		}
		r.Latency = append(r.Latency, out)
	}
	return r, nil
}

// round drops float noise from the file.
func round(v float64) float64 { return math.Round(v*1000) / 1000 }

// Save writes the recording as JSON.
func (r Recording) Save(path string) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// Load reads a recording.
func Load(path string) (Recording, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Recording{}, err
	}
	var r Recording
	if err := json.Unmarshal(b, &r); err != nil {
		return Recording{}, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}

// Until is the shard as a source would have fetched it at now over
// window: the points at or before now, and none older than the window.
func (r Recording) Until(now time.Time, window time.Duration) signals.Shard {
	from := now.Add(-window)
	at := func(sec float64) (time.Time, bool) {
		t := r.Start.Add(time.Duration(sec * float64(time.Second)))
		return t, !t.Before(from) && !t.After(now)
	}
	series := func(pts [][2]float64) signals.Series {
		var out signals.Series
		for _, p := range pts {
			if t, ok := at(p[0]); ok {
				out = append(out, signals.Point{T: t, V: p[1]})
			}
		}
		return out
	}
	s := signals.Shard{Name: "recorded", Created: series(r.Created), Completed: series(r.Completed), Queue: series(r.Queue)}
	for _, b := range r.Bounds {
		if b == 0 {
			b = math.Inf(1)
		}
		s.Latency.Bounds = append(s.Latency.Bounds, b)
	}
	for _, row := range r.Latency {
		if t, ok := at(row[0]); ok {
			s.Latency.Times = append(s.Latency.Times, t)
			s.Latency.Counts = append(s.Latency.Counts, row[1:])
		}
	}
	return s
}

// At is when the first event named what happened (zero when none did).
func (r Recording) At(what string) time.Time {
	for _, e := range r.Events {
		if e.What == what {
			return e.At
		}
	}
	return time.Time{}
}
