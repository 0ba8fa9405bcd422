// Package store is where a registry keeps what must survive a restart:
// memory (nothing), bolt (one file, one fsync per group commit) and etcd,
// whose key layout the registry's replicas share (the replica reads and
// writes it itself; see internal/registry's replica.go), plus an embedded
// etcd member. It knows the registry's records (registryapi) but not the
// registry: it imports no runtime.
package store

import (
	"github.com/shardctl/shardctl/internal/ledger"
	"github.com/shardctl/shardctl/internal/registry/registryapi"
)

// Store keeps what must survive a restart: instances, operators'
// overrides, shard slots, the deployment ledger and cutover records. Leases are not kept:
// after a restart every lease starts its clock again, so a shard gets a
// full lease to renew before it can expire. The registry acknowledges a
// write once the store holds it, and serves reads from memory.
type Store interface {
	Load() (*State, error)
	// Apply commits batches of writes, in order, at once: all of them or
	// none, so that a kill never leaves, say, an override stored without
	// the status it gave the instance. Several batches in one call are
	// the registry's group commit: one transaction, one fsync.
	Apply(bs ...Batch) error
	Close() error
}

// Batch is writes that belong together.
type Batch struct {
	Put    []*registryapi.Instance
	Delete []registryapi.InstanceRef
	// Overrides to store; the zero Override removes one.
	Overrides map[registryapi.InstanceRef]registryapi.Override
	// Slots to store; 0 releases one.
	Slots       map[registryapi.InstanceRef]int
	Deployments []ledger.Deployment
	// Cutovers to store, whole records by name.
	Cutovers []registryapi.Cutover
}

// State is what a store holds.
type State struct {
	Instances   []*registryapi.Instance
	Overrides   map[registryapi.InstanceRef]registryapi.Override
	Slots       map[registryapi.InstanceRef]int
	Deployments []ledger.Deployment
	Cutovers    []registryapi.Cutover
}

// Memory keeps nothing beyond the process; it only satisfies Store.
type Memory struct{}

// NewMemoryStore returns the store of `--store memory`.
func NewMemoryStore() Store { return &Memory{} }

func (*Memory) Load() (*State, error) {
	return &State{Overrides: map[registryapi.InstanceRef]registryapi.Override{}, Slots: map[registryapi.InstanceRef]int{}}, nil
}
func (*Memory) Apply(...Batch) error { return nil }
func (*Memory) Close() error         { return nil }
