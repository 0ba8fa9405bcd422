package route

import (
	"sync"

	"github.com/shardctl/shardctl/internal/bpmn"
	"github.com/shardctl/shardctl/internal/ledger"
	"github.com/shardctl/shardctl/internal/physicaltenant"
)

// ledgerIndex answers the proxy's questions about deployments quickly.
type LedgerIndex struct {
	mu sync.RWMutex
	// by shard id and the key that shard issued: the process version
	byShardKey map[string]map[int64]TenantProcess
	// by shard id and process version in its physical tenant
	// (tenantRef): the key that shard issued
	byProcess map[string]map[string]int64
	// message names that start a process, by tenantRef
	messageStarts map[string]bool
	deployments   int
}

// TenantProcess is a process version of the ledger in the physical
// tenant it was deployed to: the same id and version in two tenants are
// two processes.
type TenantProcess struct {
	ledger.ProcessID
	PhysicalTenant string // as physicaltenant.Of names it
}

// tenantRef is a name (a process version's, a message's) within a
// physical tenant, as a map key.
func tenantRef(tenant, name string) string { return physicaltenant.Of(tenant) + "/" + name }

func newLedgerIndex() *LedgerIndex {
	return &LedgerIndex{byShardKey: map[string]map[int64]TenantProcess{}, byProcess: map[string]map[string]int64{}, messageStarts: map[string]bool{}}
}

// Add indexes a deployment: its processes' keys on each shard.
func (x *LedgerIndex) Add(d ledger.Deployment) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.deployments = max(x.deployments, d.Seq)
	tenant := physicaltenant.Of(d.PhysicalTenant)
	for _, p := range d.Processes {
		for shardID, k := range p.Keys {
			m := x.byShardKey[shardID]
			if m == nil {
				m = map[int64]TenantProcess{}
				x.byShardKey[shardID] = m
			}
			m[k] = TenantProcess{ProcessID: p, PhysicalTenant: tenant}
			bp := x.byProcess[shardID]
			if bp == nil {
				bp = map[string]int64{}
				x.byProcess[shardID] = bp
			}
			bp[tenantRef(tenant, ledger.ProcessRef(p.BpmnProcessID, p.Version))] = k
		}
	}
	for _, n := range d.MessageStarts {
		x.messageStarts[tenantRef(tenant, n)] = true
	}
}

// Process is the process a definition key of a shard is, by id, version
// and physical tenant.
func (x *LedgerIndex) Process(shardID string, key int64) (TenantProcess, bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	p, ok := x.byShardKey[shardID][key]
	return p, ok
}

// KeyOn is the key a shard issued for a process version.
func (x *LedgerIndex) KeyOn(shardID string, p TenantProcess) (int64, bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	k, ok := x.byProcess[shardID][tenantRef(p.PhysicalTenant, ledger.ProcessRef(p.BpmnProcessID, p.Version))]
	return k, ok
}

// StartsProcess reports whether a message of that name starts a process
// in the physical tenant (as the client sent it).
func (x *LedgerIndex) StartsProcess(tenant, messageName string) bool {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.messageStarts[tenantRef(tenant, messageName)]
}

func (x *LedgerIndex) size() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.deployments
}

// MessageStartsOf lists the message names that start a process in resources.
func MessageStartsOf(resources []ledger.Resource) []string {
	var names []string
	for _, r := range resources {
		names = append(names, bpmn.MessageStartNames(r.Content)...)
	}
	return names
}
