package registry

import (
	"sync"

	"github.com/shardctl/shardctl/internal/ledger"
)

// Store keeps what must survive a restart: instances, operators'
// overrides, shard slots and the deployment ledger. Leases are not kept:
// after a restart every lease starts its clock again, so a shard gets a
// full lease to renew before it can expire. The registry writes through
// the store before it acknowledges, and serves reads from memory.
type Store interface {
	Load() (*State, error)
	PutInstance(in *Instance) error
	DeleteInstance(app, id string) error
	// PutOverride stores an operator's status override; the zero Override
	// removes it.
	PutOverride(app, id string, o Override) error
	PutSlot(app, id string, slot int) error
	PutDeployment(d ledger.Deployment) error
	Close() error
}

// State is what a store holds.
type State struct {
	Instances   []*Instance
	Overrides   map[InstanceRef]Override
	Slots       map[InstanceRef]int
	Deployments []ledger.Deployment
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
type memoryStore struct{ mu sync.Mutex }

// NewMemoryStore returns the store of `--store memory`.
func NewMemoryStore() Store { return &memoryStore{} }

func (*memoryStore) Load() (*State, error) {
	return &State{Overrides: map[InstanceRef]Override{}, Slots: map[InstanceRef]int{}}, nil
}
func (*memoryStore) PutInstance(*Instance) error                { return nil }
func (*memoryStore) DeleteInstance(string, string) error        { return nil }
func (*memoryStore) PutOverride(string, string, Override) error { return nil }
func (*memoryStore) PutSlot(string, string, int) error          { return nil }
func (*memoryStore) PutDeployment(ledger.Deployment) error      { return nil }
func (*memoryStore) Close() error                               { return nil }
