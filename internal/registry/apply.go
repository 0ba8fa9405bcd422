package registry

import (
	"time"

	"github.com/shardctl/shardctl/internal/registry/registryapi"
	"github.com/shardctl/shardctl/internal/registry/store"
)

// Every change to the registry is a Batch, planned against memory and then
// applied to memory by applyLocked, the one place memory changes. With a
// local store (memory, bolt) a replica is the only writer: memory changes
// and the store write is queued under one lock, and the caller waits
// until the store holds it. Over etcd several replicas write: the batch
// goes to etcd as a transaction guarded by what this replica saw, and
// memory changes only when the replica's watch brings it back, so every
// replica applies the same batches in etcd's order.

// writeAsCoordinator is write for what only the coordinator does
// (eviction): over etcd, it holds only while this replica is still the
// coordinator it was elected (replica.WriteAsCoordinator).
func (r *Registry) writeAsCoordinator(plan func(now time.Time) (*store.Batch, error)) error {
	if r.repl != nil {
		return r.repl.WriteAsCoordinator(plan)
	}
	return r.write(plan)
}

// write plans a change under r.mu (plan reads memory and returns the
// batch, or nil for nothing to do) and makes it.
func (r *Registry) write(plan func(now time.Time) (*store.Batch, error)) error {
	if r.repl != nil {
		return r.repl.Write(plan)
	}
	t, err := func() (*ticket, error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		if err := r.commit.err(); err != nil {
			return nil, err
		}
		now := r.opts.Now()
		b, err := plan(now)
		if err != nil || b == nil {
			return nil, err
		}
		t := r.commit.enqueue(*b)
		r.applyLocked(b, now)
		return t, nil
	}()
	if err != nil || t == nil {
		return err
	}
	return t.wait()
}

// applyLocked changes memory by a batch and records each change for
// deltas, watchers and the read snapshot. Callers hold r.mu.
func (r *Registry) applyLocked(b *store.Batch, now time.Time) {
	for ref, slot := range b.Slots {
		if slot == 0 {
			delete(r.slots, ref)
		} else {
			r.slots[ref] = slot
		}
	}
	for ref, o := range b.Overrides {
		if o.Zero() {
			delete(r.overrides, ref)
		} else {
			r.overrides[ref] = o
		}
	}
	for _, in := range b.Put {
		r.putInstance(in, now)
	}
	for _, ref := range b.Delete {
		r.deleteInstance(ref, now)
	}
	for _, d := range b.Deployments {
		d = d.Clone()
		if d.Seq >= 1 && d.Seq <= len(r.deployments) {
			r.deployments[d.Seq-1] = d
		} else {
			r.deployments = append(r.deployments, d)
		}
		r.recordLedger(d.Seq)
	}
	for _, c := range b.Cutovers {
		r.cutovers[c.Name] = c.Clone()
		r.appendChange(Change{Action: registryapi.ActionCutover, Cutover: c.Name})
	}
}

// putInstance stores an instance: a new registration starts a new lease,
// any other change (status, override, metadata) keeps the lease running.
func (r *Registry) putInstance(in *registryapi.Instance, now time.Time) {
	old := r.apps[in.App][in.InstanceID]
	if old != nil && old.inst.LeaseInfo.RegistrationTimestamp == in.LeaseInfo.RegistrationTimestamp {
		old.inst = in
		old.static = in.Metadata[registryapi.MetaStatic] == "true"
		old.duration = time.Duration(in.LeaseInfo.DurationInSecs) * time.Second
		r.record(registryapi.ActionModified, in)
		return
	}
	r.put(in, now)
	action := registryapi.ActionAdded
	if old != nil {
		action = registryapi.ActionModified
	}
	r.record(action, in)
}

func (r *Registry) deleteInstance(ref registryapi.InstanceRef, now time.Time) {
	l := r.apps[ref.App][ref.ID]
	if l == nil {
		return
	}
	delete(r.apps[ref.App], ref.ID)
	if len(r.apps[ref.App]) == 0 {
		delete(r.apps, ref.App)
	}
	gone := l.inst.Clone()
	gone.LastUpdatedTimestamp = now.UnixMilli()
	r.record(registryapi.ActionDeleted, gone)
}
