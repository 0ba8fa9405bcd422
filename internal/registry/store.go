package registry

import "github.com/shardctl/shardctl/internal/ledger"

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
	Put    []*Instance
	Delete []InstanceRef
	// Overrides to store; the zero Override removes one.
	Overrides map[InstanceRef]Override
	// Slots to store; 0 releases one.
	Slots       map[InstanceRef]int
	Deployments []ledger.Deployment
	// Cutovers to store, whole records by name.
	Cutovers []Cutover
}

// State is what a store holds.
type State struct {
	Instances   []*Instance
	Overrides   map[InstanceRef]Override
	Slots       map[InstanceRef]int
	Deployments []ledger.Deployment
	Cutovers    []Cutover
}

// InstanceRef names an instance: its app (upper case) and id.
type InstanceRef struct{ App, ID string }

// Override is what an operator set on an instance; it outlives the
// instance's own re-registrations, as Eureka's overridden status does.
type Override struct {
	Status   Status `json:"status,omitempty"`
	Draining bool   `json:"draining,omitempty"`
}

func (o Override) zero() bool { return o == Override{} }

// memoryStore keeps nothing beyond the process; it only satisfies Store.
type memoryStore struct{}

// NewMemoryStore returns the store of `--store memory`.
func NewMemoryStore() Store { return &memoryStore{} }

func (*memoryStore) Load() (*State, error) {
	return &State{Overrides: map[InstanceRef]Override{}, Slots: map[InstanceRef]int{}}, nil
}
func (*memoryStore) Apply(...Batch) error { return nil }
func (*memoryStore) Close() error         { return nil }
