package proxy

import (
	"context"
	"fmt"
	"maps"
	"sync"

	"github.com/shardctl/shardctl/internal/bpmn"
)

// Deployment is one deployment as the ledger keeps it: enough to replay it
// on a shard that joins later and to translate definition keys between
// shards.
type Deployment struct {
	Seq       int         `json:"seq"`
	Resources []Resource  `json:"resources"`
	Processes []ProcessID `json:"processes"`
	// MessageStarts are the message names that start a process.
	MessageStarts []string `json:"messageStarts,omitempty"`
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
	l.list = append(l.list, d.clone())
	return d, nil
}

func (l *MemoryLedger) SetKeys(_ context.Context, seq int, shardID string, keys map[string]int64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	d := &l.list[seq-1]
	for i := range d.Processes {
		p := &d.Processes[i]
		if k, ok := keys[processRef(p.BpmnProcessID, p.Version)]; ok {
			p.Keys[shardID] = k
		}
	}
	return nil
}

func (l *MemoryLedger) All(context.Context) ([]Deployment, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]Deployment, len(l.list))
	for i, d := range l.list {
		out[i] = d.clone()
	}
	return out, nil
}

// clone copies the parts a reader could change.
func (d Deployment) clone() Deployment {
	c := d
	c.Processes = make([]ProcessID, len(d.Processes))
	for i, p := range d.Processes {
		c.Processes[i] = ProcessID{BpmnProcessID: p.BpmnProcessID, Version: p.Version, Keys: maps.Clone(p.Keys)}
	}
	return c
}

func processRef(id string, version int32) string {
	return fmt.Sprintf("%s@%d", id, version)
}

// ledgerIndex answers the proxy's questions about deployments quickly.
type ledgerIndex struct {
	mu sync.RWMutex
	// by shard id and the key that shard issued: the process version
	byShardKey map[string]map[int64]ProcessID
	// by shard id and process version: the key that shard issued
	byProcess     map[string]map[string]int64
	messageStarts map[string]bool
	deployments   int
}

func newLedgerIndex() *ledgerIndex {
	return &ledgerIndex{byShardKey: map[string]map[int64]ProcessID{}, byProcess: map[string]map[string]int64{}, messageStarts: map[string]bool{}}
}

func (x *ledgerIndex) add(d Deployment) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.deployments = max(x.deployments, d.Seq)
	for _, p := range d.Processes {
		for shardID, k := range p.Keys {
			m := x.byShardKey[shardID]
			if m == nil {
				m = map[int64]ProcessID{}
				x.byShardKey[shardID] = m
			}
			m[k] = p
			bp := x.byProcess[shardID]
			if bp == nil {
				bp = map[string]int64{}
				x.byProcess[shardID] = bp
			}
			bp[processRef(p.BpmnProcessID, p.Version)] = k
		}
	}
	for _, n := range d.MessageStarts {
		x.messageStarts[n] = true
	}
}

func (x *ledgerIndex) process(shardID string, key int64) (ProcessID, bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	p, ok := x.byShardKey[shardID][key]
	return p, ok
}

// keyOn is the key a shard issued for a process version.
func (x *ledgerIndex) keyOn(shardID string, p ProcessID) (int64, bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	k, ok := x.byProcess[shardID][processRef(p.BpmnProcessID, p.Version)]
	return k, ok
}

func (x *ledgerIndex) startsProcess(messageName string) bool {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.messageStarts[messageName]
}

func (x *ledgerIndex) size() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.deployments
}

func messageStartsOf(resources []Resource) []string {
	var names []string
	for _, r := range resources {
		names = append(names, bpmn.MessageStartNames(r.Content)...)
	}
	return names
}
