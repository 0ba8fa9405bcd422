package route

import (
	"sync"

	"github.com/shardctl/shardctl/internal/bpmn"
	"github.com/shardctl/shardctl/internal/ledger"
)

// ledgerIndex answers the proxy's questions about deployments quickly.
type LedgerIndex struct {
	mu sync.RWMutex
	// by shard id and the key that shard issued: the process version
	byShardKey map[string]map[int64]ledger.ProcessID
	// by shard id and process version: the key that shard issued
	byProcess     map[string]map[string]int64
	messageStarts map[string]bool
	deployments   int
}

func newLedgerIndex() *LedgerIndex {
	return &LedgerIndex{byShardKey: map[string]map[int64]ledger.ProcessID{}, byProcess: map[string]map[string]int64{}, messageStarts: map[string]bool{}}
}

// Add indexes a deployment: its processes' keys on each shard.
func (x *LedgerIndex) Add(d ledger.Deployment) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.deployments = max(x.deployments, d.Seq)
	for _, p := range d.Processes {
		for shardID, k := range p.Keys {
			m := x.byShardKey[shardID]
			if m == nil {
				m = map[int64]ledger.ProcessID{}
				x.byShardKey[shardID] = m
			}
			m[k] = p
			bp := x.byProcess[shardID]
			if bp == nil {
				bp = map[string]int64{}
				x.byProcess[shardID] = bp
			}
			bp[ledger.ProcessRef(p.BpmnProcessID, p.Version)] = k
		}
	}
	for _, n := range d.MessageStarts {
		x.messageStarts[n] = true
	}
}

// Process is the process a definition key of a shard is, by id and version.
func (x *LedgerIndex) Process(shardID string, key int64) (ledger.ProcessID, bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	p, ok := x.byShardKey[shardID][key]
	return p, ok
}

// keyOn is the key a shard issued for a process version.
func (x *LedgerIndex) KeyOn(shardID string, p ledger.ProcessID) (int64, bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	k, ok := x.byProcess[shardID][ledger.ProcessRef(p.BpmnProcessID, p.Version)]
	return k, ok
}

// StartsProcess reports whether a message of that name starts a process.
func (x *LedgerIndex) StartsProcess(messageName string) bool {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.messageStarts[messageName]
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
