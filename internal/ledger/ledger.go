// Package ledger is the deployment ledger — every deployment the federation
// proxy made, enough to replay it on a shard that joins later and to
// translate process definition keys between shards; kept in memory by the
// proxy or durably by the registry.
// It imports nothing of this module: the proxy and the registry both keep
// it.
package ledger

import (
	"context"
	"fmt"
	"maps"
	"sync"
)

// Deployment is one deployment as the ledger keeps it.
type Deployment struct {
	Seq       int         `json:"seq"`
	Resources []Resource  `json:"resources"`
	Processes []ProcessID `json:"processes"`
	// MessageStarts are the message names that start a process.
	MessageStarts []string `json:"messageStarts,omitempty"`
	// PhysicalTenant it was deployed to (8.10; "": "default"), the only
	// one it is replayed to.
	PhysicalTenant string `json:"physicalTenant,omitempty"`
}

// Resource is a deployed file.
type Resource struct {
	Name    string `json:"name"`
	Content []byte `json:"content"`
}

// ProcessID is one process version and its key on each shard.
type ProcessID struct {
	BpmnProcessID string           `json:"bpmnProcessId"`
	Version       int32            `json:"version"`
	Keys          map[string]int64 `json:"keys"` // shard id -> key the shard issued
}

// Ledger stores deployments. The in-memory one lives as long as the proxy;
// the registry gives it a durable home shared by proxy replicas.
type Ledger interface {
	Append(ctx context.Context, d Deployment) (Deployment, error)
	// SetKeys records a shard's keys for a deployment it was replayed.
	SetKeys(ctx context.Context, seq int, shardID string, keys map[string]int64) error
	All(ctx context.Context) ([]Deployment, error)
}

// MemoryLedger is a Ledger in memory.
type MemoryLedger struct {
	mu   sync.Mutex
	list []Deployment
}

func (l *MemoryLedger) Append(_ context.Context, d Deployment) (Deployment, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	d.Seq = len(l.list) + 1
	l.list = append(l.list, d.Clone())
	return d, nil
}

func (l *MemoryLedger) SetKeys(_ context.Context, seq int, shardID string, keys map[string]int64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if seq < 1 || seq > len(l.list) {
		return fmt.Errorf("no deployment %d in the ledger", seq)
	}
	l.list[seq-1].SetKeys(shardID, keys)
	return nil
}

func (l *MemoryLedger) All(context.Context) ([]Deployment, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]Deployment, len(l.list))
	for i, d := range l.list {
		out[i] = d.Clone()
	}
	return out, nil
}

// SetKeys records the keys a shard issued, indexed by ProcessRef. Every
// Ledger shares it so they agree on which keys a replay records.
func (d *Deployment) SetKeys(shardID string, keys map[string]int64) {
	for i := range d.Processes {
		p := &d.Processes[i]
		if k, ok := keys[ProcessRef(p.BpmnProcessID, p.Version)]; ok {
			if p.Keys == nil {
				p.Keys = map[string]int64{} // e.g. decoded from JSON "keys": null
			}
			p.Keys[shardID] = k
		}
	}
}

// Clone copies the parts a reader could change.
func (d Deployment) Clone() Deployment {
	c := d
	c.Processes = make([]ProcessID, len(d.Processes))
	for i, p := range d.Processes {
		c.Processes[i] = ProcessID{BpmnProcessID: p.BpmnProcessID, Version: p.Version, Keys: maps.Clone(p.Keys)}
	}
	return c
}

// ProcessRef names a process version, as a map key.
func ProcessRef(id string, version int32) string {
	return fmt.Sprintf("%s@%d", id, version)
}
