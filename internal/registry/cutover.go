package registry

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// A cutover moves new work of an app from one pool of shards to another.
// The registry keeps its record: the weights the proxies place new
// instances by, the step the running `cutover apply` completed, and the
// lease that apply holds so that no second one runs beside it. What the
// steps are (the plan) and what they saw (progress) are the migrate
// package's, kept here as opaque JSON so a restarted apply resumes.

// Cutover phases. Done, RolledBack and Failed are final.
const (
	PhasePending     = "Pending"
	PhaseProgressing = "Progressing"
	PhasePaused      = "Paused"
	PhaseDraining    = "Draining"
	PhaseDone        = "Done"
	PhaseRolledBack  = "RolledBack"
	PhaseFailed      = "Failed"
)

// Final reports whether a phase ends a cutover.
func Final(phase string) bool {
	return phase == PhaseDone || phase == PhaseRolledBack || phase == PhaseFailed
}

// Cutover is the record of one cutover.
type Cutover struct {
	Name string `json:"name"`
	App  string `json:"app"`
	From string `json:"from"`
	To   string `json:"to"`
	// Weights are each pool's share of new instances, in percent. The
	// proxy places new instances only in the pools named, by weight.
	Weights map[string]int `json:"weights"`
	Phase   string         `json:"phase"`
	// Step is how many steps of the plan are complete.
	Step    int    `json:"step"`
	Message string `json:"message,omitempty"`
	// Spec is the plan the apply runs and Status what it saw, as the
	// migrate package writes them.
	Spec   json.RawMessage `json:"spec,omitempty"`
	Status json.RawMessage `json:"status,omitempty"`
	// Holder holds the lease until LeaseExpires: writes from anyone else
	// are refused meanwhile.
	Holder       string     `json:"holder,omitempty"`
	LeaseExpires *time.Time `json:"leaseExpires,omitempty"`
	// Version counts the record's writes: a write names the version it
	// read, and is refused if the record moved on since.
	Version   uint64    `json:"version"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// Clone copies a record, so that one handed out is never changed.
func (c Cutover) Clone() Cutover {
	c.Weights = maps.Clone(c.Weights)
	c.Spec = slices.Clone(c.Spec)
	c.Status = slices.Clone(c.Status)
	if c.LeaseExpires != nil {
		t := *c.LeaseExpires
		c.LeaseExpires = &t
	}
	return c
}

// leased reports whether someone other than holder holds the lease now.
func (c Cutover) leased(holder string, now time.Time) bool {
	return c.Holder != "" && c.Holder != holder && c.LeaseExpires != nil && now.Before(*c.LeaseExpires)
}

// LeaseError is a write or a lease refused because another holder's
// lease still runs.
type LeaseError struct {
	Cutover, Holder string
	Until           time.Time
}

func (e *LeaseError) Error() string {
	return fmt.Sprintf("%v: cutover %s is held by %s until %s", ErrLeased, e.Cutover, e.Holder, e.Until.UTC().Format(time.RFC3339))
}

func (e *LeaseError) Unwrap() error { return ErrLeased }

// Cutovers returns the records of app ("" for every app), by name.
func (r *Registry) Cutovers(app string) []Cutover {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.cutoversLocked(strings.ToUpper(app))
}

func (r *Registry) cutoversLocked(app string) []Cutover {
	out := []Cutover{}
	for _, name := range slices.Sorted(maps.Keys(r.cutovers)) {
		if c := r.cutovers[name]; app == "" || c.App == app {
			out = append(out, c.Clone())
		}
	}
	return out
}

// Cutover returns one record.
func (r *Registry) Cutover(name string) (Cutover, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	c, ok := r.cutovers[name]
	if !ok {
		return Cutover{}, fmt.Errorf("%w: no cutover %q", ErrNotFound, name)
	}
	return c.Clone(), nil
}

// PutCutover writes a record: version 0 creates one (or replaces a final
// one), any other must be the stored record's version. The lease is not
// the writer's to set: it keeps the stored one, and a writer other than
// its holder is refused while it runs. An app has one cutover in progress
// at a time.
func (r *Registry) PutCutover(c Cutover) (Cutover, error) {
	if c.Name == "" {
		return Cutover{}, errors.New("a cutover needs a name")
	}
	if err := checkName("cutover name", c.Name); err != nil {
		return Cutover{}, err
	}
	if c.App == "" || c.From == "" || c.To == "" || c.From == c.To {
		return Cutover{}, errors.New("a cutover needs an app and two different pools, from and to")
	}
	for pool, w := range c.Weights {
		if w < 0 || w > 100 {
			return Cutover{}, fmt.Errorf("weight of pool %q is %d: want 0-100", pool, w)
		}
	}
	c.App = strings.ToUpper(c.App)
	var was Cutover
	created := false
	out, err := r.writeCutover(c.Name, func(old Cutover, exists bool, now time.Time) (Cutover, error) {
		was, created = old, !exists || c.Version == 0
		switch {
		case c.Version == 0 && exists && !Final(old.Phase):
			return Cutover{}, fmt.Errorf("%w: cutover %s is in progress (%s, step %d)", ErrConflict, c.Name, old.Phase, old.Step)
		case c.Version != 0 && (!exists || c.Version != old.Version):
			return Cutover{}, fmt.Errorf("%w: cutover %s is at version %d, not %d: read it again", ErrConflict, c.Name, old.Version, c.Version)
		case exists && old.leased(c.Holder, now):
			return Cutover{}, &LeaseError{Cutover: c.Name, Holder: old.Holder, Until: *old.LeaseExpires}
		}
		if !Final(c.Phase) {
			for _, other := range r.cutovers {
				if other.Name != c.Name && other.App == c.App && !Final(other.Phase) {
					return Cutover{}, fmt.Errorf("%w: cutover %s of %s is in progress (%s): one at a time", ErrConflict, other.Name, c.App, other.Phase)
				}
			}
		}
		c.Holder, c.LeaseExpires = old.Holder, old.LeaseExpires
		c.Version = old.Version + 1
		return c, nil
	})
	if err != nil {
		return Cutover{}, err
	}
	args := []any{"cutover", out.Name, "app", out.App, "from", out.From, "to", out.To, "phase", out.Phase, "step", out.Step,
		"weights", FormatWeights(out.Weights)}
	switch {
	case created:
		r.log.Info("cutover created", args...)
	// Progress alone (gate readings) is written often: not a change.
	case was.Phase != out.Phase || was.Step != out.Step || !maps.Equal(was.Weights, out.Weights):
		r.log.Info("cutover updated", append(args, "previousPhase", was.Phase, "previousStep", was.Step,
			"previousWeights", FormatWeights(was.Weights), "message", out.Message)...)
	}
	return out, nil
}

// FormatWeights renders pool weights for a log line, pools in order:
// "blue=90 green=10", or "none" when new instances go to every pool alike.
func FormatWeights(w map[string]int) string {
	if len(w) == 0 {
		return "none"
	}
	parts := make([]string, 0, len(w))
	for _, pool := range slices.Sorted(maps.Keys(w)) {
		parts = append(parts, fmt.Sprintf("%s=%d", pool, w[pool]))
	}
	return strings.Join(parts, " ")
}

// LeaseCutover gives holder the lease of a record for ttl, or renews it;
// it is refused while someone else's runs, unless that someone is
// replace: the caller knows that holder is gone (a process that died on
// its machine) or means to preempt it (a rollback).
func (r *Registry) LeaseCutover(name, holder string, ttl time.Duration, replace string) (Cutover, error) {
	if holder == "" || ttl <= 0 || ttl > time.Hour {
		return Cutover{}, errors.New("a lease needs a holder and a ttl of up to an hour")
	}
	previous := ""
	out, err := r.writeCutover(name, func(old Cutover, exists bool, now time.Time) (Cutover, error) {
		switch {
		case !exists:
			return Cutover{}, fmt.Errorf("%w: no cutover %q", ErrNotFound, name)
		case old.leased(holder, now) && (replace == "" || old.Holder != replace):
			return Cutover{}, &LeaseError{Cutover: name, Holder: old.Holder, Until: *old.LeaseExpires}
		}
		previous = "" // whose lease still ran: holder itself for a renewal
		if old.LeaseExpires != nil && now.Before(*old.LeaseExpires) {
			previous = old.Holder
		}
		until := now.Add(ttl)
		old.Holder, old.LeaseExpires = holder, &until
		old.Version++
		return old, nil
	})
	// Renewals come every few seconds: only a new holder is a change.
	if err == nil && previous != holder {
		r.log.Info("cutover lease taken", "cutover", name, "holder", holder, "replaced", previous, "until", out.LeaseExpires.UTC())
	}
	return out, err
}

// ReleaseCutover ends holder's lease; releasing a lease one does not hold
// changes nothing.
func (r *Registry) ReleaseCutover(name, holder string) error {
	released := false
	_, err := r.writeCutover(name, func(old Cutover, exists bool, _ time.Time) (Cutover, error) {
		if !exists {
			return Cutover{}, fmt.Errorf("%w: no cutover %q", ErrNotFound, name)
		}
		released = old.Holder == holder
		if released {
			old.Holder, old.LeaseExpires = "", nil
			old.Version++
		}
		return old, nil
	})
	if err == nil && released {
		r.log.Info("cutover lease released", "cutover", name, "holder", holder)
	}
	return err
}

// writeCutover runs change on the stored record (checks and the new
// version under the lock) and writes the result.
func (r *Registry) writeCutover(name string, change func(old Cutover, exists bool, now time.Time) (Cutover, error)) (Cutover, error) {
	var out Cutover
	err := r.write(func(now time.Time) (*Batch, error) {
		old, exists := r.cutovers[name]
		c, err := change(old.Clone(), exists, now)
		if err != nil {
			return nil, err
		}
		if exists && c.Version == old.Version {
			out = old.Clone()
			return nil, nil
		}
		c.Name, c.UpdatedAt = name, now
		out = c.Clone()
		return &Batch{Cutovers: []Cutover{c}}, nil
	})
	if err != nil {
		return Cutover{}, err
	}
	return out, nil
}
