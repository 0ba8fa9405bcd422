package sim

import (
	"crypto/sha256"
	"sync"

	"github.com/shardctl/shardctl/internal/bpmn"
	"github.com/shardctl/shardctl/internal/physicaltenant"
)

// process is one deployed version of a BPMN process.
type process struct {
	key          int64
	id           string
	version      int32
	resourceName string
	checksum     [32]byte
	model        *bpmn.Process
	// physicalTenant it was deployed to (8.10): its versions and its
	// creation by id are that tenant's alone.
	physicalTenant string
}

// name is the process's name, or its id when it has none (as Operate
// shows it).
func (p *process) name() string {
	if p.model.Name != "" {
		return p.model.Name
	}
	return p.id
}

// repository holds the deployed processes of the whole simulated cluster.
// Deployments are processed on partition 1 (Zeebe's deployment partition)
// and read from every partition.
type repository struct {
	mu       sync.RWMutex
	byKey    map[int64]*process
	versions map[string][]*process // by versionsKey, oldest first
}

// versionsKey names a process id within a physical tenant: each tenant
// versions its processes apart, as each is an engine of its own.
func versionsKey(tenant, id string) string { return physicaltenant.Of(tenant) + "/" + id }

func newRepository() *repository {
	return &repository{byKey: map[int64]*process{}, versions: map[string][]*process{}}
}

func (r *repository) latest(tenant, id string) *process {
	r.mu.RLock()
	defer r.mu.RUnlock()
	vs := r.versions[versionsKey(tenant, id)]
	if len(vs) == 0 {
		return nil
	}
	return vs[len(vs)-1]
}

func (r *repository) version(tenant, id string, v int32) *process {
	r.mu.RLock()
	defer r.mu.RUnlock()
	vs := r.versions[versionsKey(tenant, id)]
	if v < 1 || int(v) > len(vs) {
		return nil
	}
	return vs[v-1]
}

func (r *repository) byDefinitionKey(key int64) *process {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.byKey[key]
}

// latestAll returns the latest version of every process; message and
// signal start events are open only on latest versions.
func (r *repository) latestAll() []*process {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]*process, 0, len(r.versions))
	for _, vs := range r.versions {
		out = append(out, vs[len(vs)-1])
	}
	return out
}

// parsedResource is a resource parsed outside the partition, ready to be
// versioned by it.
type parsedResource struct {
	name      string
	checksum  [32]byte
	processes []*bpmn.Process
}

func parseResource(name string, content []byte) (parsedResource, error) {
	procs, err := bpmn.Parse(name, content)
	if err != nil {
		return parsedResource{}, err
	}
	return parsedResource{name: name, checksum: sha256.Sum256(content), processes: procs}, nil
}

// deploy versions the parsed resources: a process whose resource is
// byte-identical to its latest version keeps that version and key (Zeebe's
// duplicate detection); otherwise it becomes the next version with a new
// key from keys.
func (r *repository) deploy(tenant string, resources []parsedResource, keys *keyGenerator) []*process {
	r.mu.Lock()
	defer r.mu.Unlock()
	tenant = physicaltenant.Of(tenant)
	var out []*process
	for _, res := range resources {
		for _, m := range res.processes {
			vk := versionsKey(tenant, m.ID)
			vs := r.versions[vk]
			if n := len(vs); n > 0 && vs[n-1].checksum == res.checksum && vs[n-1].resourceName == res.name {
				out = append(out, vs[n-1])
				continue
			}
			p := &process{
				key:          keys.next(),
				id:           m.ID,
				version:      int32(len(vs) + 1),
				resourceName: res.name,
				checksum:     res.checksum,
				model:        m,

				physicalTenant: tenant,
			}
			r.versions[vk] = append(vs, p)
			r.byKey[p.key] = p
			out = append(out, p)
		}
	}
	return out
}
