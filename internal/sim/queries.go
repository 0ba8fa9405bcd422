package sim

import (
	"context"

	"github.com/shardctl/shardctl/internal/restgateway"
	"github.com/shardctl/shardctl/internal/search"
)

// queries answer the REST API's searches and gets by key from what the
// partitions exported and the processes deployed: eventually consistent
// with the engine, as Camunda's are with its brokers, though here only by
// the time a record takes to be processed.
type queries struct{ c *cluster }

var _ restgateway.Queries = queries{}

func exportIndex(r *search.Resource) int {
	for i, er := range exportedResource {
		if er == r {
			return i
		}
	}
	return -1
}

func (q queries) items(r *search.Resource, f search.Filter) []search.Item {
	if r == search.ProcessDefinitions {
		var out []search.Item
		for _, it := range q.c.repo.items() {
			if f.Match(it) {
				out = append(out, it)
			}
		}
		return out
	}
	res := exportIndex(r)
	var out []search.Item
	for _, p := range q.c.partitions {
		out = p.exp.collect(res, f, out)
	}
	return out
}

func (q queries) Search(_ context.Context, r *search.Resource, sq search.Query) (restgateway.Answer, error) {
	res := search.Answer(r, q.items(r, sq.Filter), sq)
	return restgateway.Answer{Body: res.AppendJSON(r, sq.Order(r), nil)}, nil
}

func (q queries) Get(_ context.Context, r *search.Resource, key int64) (restgateway.Answer, error) {
	var it search.Item
	found := false
	if r == search.ProcessDefinitions {
		if p := q.c.repo.byDefinitionKey(key); p != nil {
			it, found = q.c.repo.item(p), true
		}
	} else if p := q.c.partitionFor(PartitionOfKey(key)); p != nil {
		it, found = p.exp.get(exportIndex(r), key)
	}
	if !found {
		return restgateway.Answer{}, restgateway.NotFound(r, key)
	}
	return restgateway.Answer{Body: it.AppendJSON(r, nil)}, nil
}

// items are every deployed process version as the search reports them.
func (r *repository) items() []search.Item {
	r.mu.RLock()
	defer r.mu.RUnlock()
	var out []search.Item
	for _, vs := range r.versions {
		for _, p := range vs {
			out = append(out, r.itemLocked(p, p == vs[len(vs)-1]))
		}
	}
	return out
}

func (r *repository) item(p *process) search.Item {
	r.mu.RLock()
	defer r.mu.RUnlock()
	vs := r.versions[p.id]
	return r.itemLocked(p, vs[len(vs)-1] == p)
}

func (r *repository) itemLocked(p *process, latest bool) search.Item {
	res := search.ProcessDefinitions
	return search.NewItem(res).
		Set(res, "processDefinitionKey", search.KeyValue(p.key)).
		Set(res, "processDefinitionId", search.StringValue(p.id)).
		Set(res, "name", search.StringValue(p.name())).
		Set(res, "version", search.IntValue(int64(p.version))).
		Set(res, "resourceName", search.StringValue(p.resourceName)).
		Set(res, "tenantId", search.StringValue(defaultTenant)).
		Set(res, "hasStartForm", search.BoolValue(false)).
		Set(res, "isLatestVersion", search.BoolValue(latest))
}
