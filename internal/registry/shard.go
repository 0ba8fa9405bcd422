package registry

import (
	"fmt"
	"strings"
	"time"

	"github.com/shardctl/shardctl/internal/ledger"
	"github.com/shardctl/shardctl/internal/registry/registryapi"
	"github.com/shardctl/shardctl/internal/registry/store"
)

// Shards lists the instances of app as shards, by slot.
func (r *Registry) Shards(app string) []registryapi.Shard {
	app = strings.ToUpper(app)
	ins := r.Instances(app)
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]registryapi.Shard, 0, len(ins))
	for _, in := range ins {
		out = append(out, registryapi.ShardOf(in, r.overrides[registryapi.InstanceRef{App: in.App, ID: in.InstanceID}]))
	}
	return out
}

// shardOfChange reads a change's instance as a shard.
func (r *Registry) shardOfChange(in *registryapi.Instance) registryapi.Shard {
	r.mu.RLock()
	o := r.overrides[registryapi.InstanceRef{App: in.App, ID: in.InstanceID}]
	r.mu.RUnlock()
	return registryapi.ShardOf(in, o)
}

// SetState sets a shard's state the way an operator means it: DRAINING
// and OUT_OF_SERVICE override the status the shard reports (Eureka
// clients see OUT_OF_SERVICE for both); UP removes the override, or, for
// a shard that registered itself OUT_OF_SERVICE (held out until an
// operator lets it in, as Eureka clients do), overrides it with UP.
func (r *Registry) SetState(app, id, state string) error {
	var o registryapi.Override
	switch strings.ToUpper(state) {
	case registryapi.StateUp:
		if in, err := r.Instance(app, id); err == nil && in.Status == registryapi.StatusOutOfService {
			o = registryapi.Override{Status: registryapi.StatusUp}
		}
	case registryapi.StateDraining:
		o = registryapi.Override{Status: registryapi.StatusOutOfService, Draining: true}
	case registryapi.StateOutOfService:
		o = registryapi.Override{Status: registryapi.StatusOutOfService}
	case registryapi.StateDown:
		o = registryapi.Override{Status: registryapi.StatusDown}
	default:
		return fmt.Errorf("state %q: expected UP, DRAINING, OUT_OF_SERVICE or DOWN", state)
	}
	return r.SetOverride(app, id, o)
}

// AppendDeployment adds a deployment to the ledger, numbering it.
func (r *Registry) AppendDeployment(d ledger.Deployment) (ledger.Deployment, error) {
	err := r.write(func(time.Time) (*store.Batch, error) {
		d.Seq = len(r.deployments) + 1
		return &store.Batch{Deployments: []ledger.Deployment{d.Clone()}}, nil
	})
	if err != nil {
		return ledger.Deployment{}, err
	}
	processes := make([]string, 0, len(d.Processes))
	for _, p := range d.Processes {
		processes = append(processes, ledger.ProcessRef(p.BpmnProcessID, p.Version))
	}
	r.log.Info("deployment added to the ledger", "seq", d.Seq, "processes", processes, "resources", len(d.Resources))
	return d, nil
}

// SetDeploymentKeys records the keys a shard issued when it was replayed
// a deployment.
func (r *Registry) SetDeploymentKeys(seq int, shardID string, keys map[string]int64) error {
	err := r.write(func(time.Time) (*store.Batch, error) {
		if seq < 1 || seq > len(r.deployments) {
			return nil, fmt.Errorf("%w: no deployment %d in the ledger", registryapi.ErrNotFound, seq)
		}
		d := r.deployments[seq-1].Clone()
		d.SetKeys(shardID, keys)
		return &store.Batch{Deployments: []ledger.Deployment{d}}, nil
	})
	if err == nil {
		r.log.Debug("deployment replayed to a shard", "seq", seq, "shard", shardID, "processes", len(keys))
	}
	return err
}

// Deployments returns the ledger.
func (r *Registry) Deployments() []ledger.Deployment {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]ledger.Deployment, len(r.deployments))
	for i, d := range r.deployments {
		out[i] = d.Clone()
	}
	return out
}
