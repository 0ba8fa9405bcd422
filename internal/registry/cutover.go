package registry

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/shardctl/shardctl/internal/registry/registryapi"
	"github.com/shardctl/shardctl/internal/registry/store"
)

// A cutover moves new work of an app from one pool of shards to another.
// The registry keeps its record: the weights the proxies place new
// instances by, the step the running `cutover apply` completed, and the
// lease that apply holds so that no second one runs beside it. What the
// steps are (the plan) and what they saw (progress) are the migrate
// package's, kept here as opaque JSON so a restarted apply resumes.

// Cutovers returns the records of app ("" for every app), by name.
func (r *Registry) Cutovers(app string) []registryapi.Cutover {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.cutoversLocked(strings.ToUpper(app))
}

func (r *Registry) cutoversLocked(app string) []registryapi.Cutover {
	out := []registryapi.Cutover{}
	for _, name := range slices.Sorted(maps.Keys(r.cutovers)) {
		if c := r.cutovers[name]; app == "" || c.App == app {
			out = append(out, c.Clone())
		}
	}
	return out
}

// Cutover returns one record.
func (r *Registry) Cutover(name string) (registryapi.Cutover, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	c, ok := r.cutovers[name]
	if !ok {
		return registryapi.Cutover{}, fmt.Errorf("%w: no cutover %q", registryapi.ErrNotFound, name)
	}
	return c.Clone(), nil
}

// PutCutover writes a record: version 0 creates one (or replaces a final
// one), any other must be the stored record's version. The lease is not
// the writer's to set: it keeps the stored one, and a writer other than
// its holder is refused while it runs. An app has one cutover in progress
// at a time.
func (r *Registry) PutCutover(c registryapi.Cutover) (registryapi.Cutover, error) {
	if c.Name == "" {
		return registryapi.Cutover{}, errors.New("a cutover needs a name")
	}
	if err := registryapi.CheckName("cutover name", c.Name); err != nil {
		return registryapi.Cutover{}, err
	}
	if c.App == "" || c.From == "" || c.To == "" || c.From == c.To {
		return registryapi.Cutover{}, errors.New("a cutover needs an app and two different pools, from and to")
	}
	for pool, w := range c.Weights {
		if w < 0 || w > 100 {
			return registryapi.Cutover{}, fmt.Errorf("weight of pool %q is %d: want 0-100", pool, w)
		}
	}
	c.App = strings.ToUpper(c.App)
	var was registryapi.Cutover
	created := false
	out, err := r.writeCutover(c.Name, func(old registryapi.Cutover, exists bool, now time.Time) (registryapi.Cutover, error) {
		was, created = old, !exists || c.Version == 0
		switch {
		case c.Version == 0 && exists && !registryapi.Final(old.Phase):
			return registryapi.Cutover{}, fmt.Errorf("%w: cutover %s is in progress (%s, step %d)", registryapi.ErrConflict, c.Name, old.Phase, old.Step)
		case c.Version != 0 && (!exists || c.Version != old.Version):
			return registryapi.Cutover{}, fmt.Errorf("%w: cutover %s is at version %d, not %d: read it again", registryapi.ErrConflict, c.Name, old.Version, c.Version)
		case exists && old.Leased(c.Holder, now):
			return registryapi.Cutover{}, &registryapi.LeaseError{Cutover: c.Name, Holder: old.Holder, Until: *old.LeaseExpires}
		}
		if !registryapi.Final(c.Phase) {
			for _, other := range r.cutovers {
				if other.Name != c.Name && other.App == c.App && !registryapi.Final(other.Phase) {
					return registryapi.Cutover{}, fmt.Errorf("%w: cutover %s of %s is in progress (%s): one at a time", registryapi.ErrConflict, other.Name, c.App, other.Phase)
				}
			}
		}
		c.Holder, c.LeaseExpires = old.Holder, old.LeaseExpires
		c.Version = old.Version + 1
		return c, nil
	})
	if err != nil {
		return registryapi.Cutover{}, err
	}
	args := []any{"cutover", out.Name, "app", out.App, "from", out.From, "to", out.To, "phase", out.Phase, "step", out.Step,
		"weights", registryapi.FormatWeights(out.Weights)}
	switch {
	case created:
		r.log.Info("cutover created", args...)
	// Progress alone (gate readings) is written often: not a change.
	case was.Phase != out.Phase || was.Step != out.Step || !maps.Equal(was.Weights, out.Weights):
		r.log.Info("cutover updated", append(args, "previousPhase", was.Phase, "previousStep", was.Step,
			"previousWeights", registryapi.FormatWeights(was.Weights), "message", out.Message)...)
	}
	return out, nil
}

// LeaseCutover gives holder the lease of a record for ttl, or renews it;
// it is refused while someone else's runs, unless that someone is
// replace: the caller knows that holder is gone (a process that died on
// its machine) or means to preempt it (a rollback).
func (r *Registry) LeaseCutover(name, holder string, ttl time.Duration, replace string) (registryapi.Cutover, error) {
	if holder == "" || ttl <= 0 || ttl > time.Hour {
		return registryapi.Cutover{}, errors.New("a lease needs a holder and a ttl of up to an hour")
	}
	previous := ""
	out, err := r.writeCutover(name, func(old registryapi.Cutover, exists bool, now time.Time) (registryapi.Cutover, error) {
		switch {
		case !exists:
			return registryapi.Cutover{}, fmt.Errorf("%w: no cutover %q", registryapi.ErrNotFound, name)
		case old.Leased(holder, now) && (replace == "" || old.Holder != replace):
			return registryapi.Cutover{}, &registryapi.LeaseError{Cutover: name, Holder: old.Holder, Until: *old.LeaseExpires}
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
	_, err := r.writeCutover(name, func(old registryapi.Cutover, exists bool, _ time.Time) (registryapi.Cutover, error) {
		if !exists {
			return registryapi.Cutover{}, fmt.Errorf("%w: no cutover %q", registryapi.ErrNotFound, name)
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
func (r *Registry) writeCutover(name string, change func(old registryapi.Cutover, exists bool, now time.Time) (registryapi.Cutover, error)) (registryapi.Cutover, error) {
	var out registryapi.Cutover
	err := r.write(func(now time.Time) (*store.Batch, error) {
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
		return &store.Batch{Cutovers: []registryapi.Cutover{c}}, nil
	})
	if err != nil {
		return registryapi.Cutover{}, err
	}
	return out, nil
}
