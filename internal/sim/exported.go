package sim

import (
	"sync"
	"time"

	"github.com/shardctl/shardctl/internal/search"
)

// DefaultQueryHistory is how many ended entities (instances, jobs,
// incidents) a partition keeps for searches.
const DefaultQueryHistory = 10000

// Resource indexes of a partition's exported items.
const (
	expInstances = iota
	expJobs
	expIncidents
	expElements
	expVariables
	expResources
)

var exportedResource = [expResources]*search.Resource{search.ProcessInstances, search.Jobs, search.Incidents, search.ElementInstances, search.Variables}

// exported is what a partition has exported for queries: the simulator's
// stand-in for Zeebe's secondary storage (Elasticsearch behind Operate
// and the /v2 searches). The partition's goroutine writes it as it
// processes records; searches read it under the read lock. An item is
// never changed once stored, only replaced, so a reader may keep it
// after the lock is released.
type exported struct {
	mu    sync.RWMutex
	items [expResources]map[int64]search.Item
	// ended lists entities that ended, oldest first; past history the
	// oldest are forgotten (an instance with its variables).
	ended   []endedRef
	history int
}

type endedRef struct {
	res  int
	key  int64
	vars []int64 // an instance's variable keys
}

func newExported(history int) *exported {
	e := &exported{history: history}
	for i := range e.items {
		e.items[i] = map[int64]search.Item{}
	}
	return e
}

func (e *exported) put(res int, key int64, it search.Item) {
	e.mu.Lock()
	e.items[res][key] = it
	e.mu.Unlock()
}

// end stores an entity's last item and counts it against the history.
func (e *exported) end(res int, key int64, it search.Item, vars []int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.items[res][key] = it
	e.ended = append(e.ended, endedRef{res: res, key: key, vars: vars})
	for len(e.ended) > e.history {
		old := e.ended[0]
		e.ended[0] = endedRef{}
		e.ended = e.ended[1:]
		delete(e.items[old.res], old.key)
		for _, v := range old.vars {
			delete(e.items[expVariables], v)
		}
	}
	if len(e.ended) == 0 {
		e.ended = nil
	}
}

// collect appends the items of res the filter matches.
func (e *exported) collect(res int, f search.Filter, out []search.Item) []search.Item {
	e.mu.RLock()
	defer e.mu.RUnlock()
	for _, it := range e.items[res] {
		if f.Match(it) {
			out = append(out, it)
		}
	}
	return out
}

func (e *exported) get(res int, key int64) (search.Item, bool) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	it, ok := e.items[res][key]
	return it, ok
}

// The items as the partition exports them.

func (p *partition) exportInstance(inst *instance, state string, ended time.Time) {
	r := search.ProcessInstances
	it := search.NewItem(r).
		Set(r, "processInstanceKey", search.KeyValue(inst.key)).
		Set(r, "processDefinitionId", search.StringValue(inst.proc.id)).
		Set(r, "processDefinitionVersion", search.IntValue(int64(inst.proc.version))).
		Set(r, "processDefinitionKey", search.KeyValue(inst.proc.key)).
		Set(r, "startDate", search.DateValue(inst.started)).
		Set(r, "endDate", search.DateValue(ended)).
		Set(r, "state", search.EnumValue(state)).
		Set(r, "hasIncident", search.BoolValue(inst.incidents > 0)).
		Set(r, "tenantId", search.StringValue(defaultTenant)).
		Set(r, "tags", search.RawValue("[]")).
		Set(r, "processDefinitionName", search.StringValue(inst.proc.name()))
	if ended.IsZero() {
		p.exp.put(expInstances, inst.key, it)
		return
	}
	vars := make([]int64, 0, len(inst.varKeys))
	for _, k := range inst.varKeys {
		vars = append(vars, k)
	}
	p.exp.end(expInstances, inst.key, it, vars)
}

// Job states as the search reports them (Camunda's JobStateEnum).
const (
	jobCreatedState   = "CREATED"
	jobCompletedState = "COMPLETED"
	jobFailedState    = "FAILED"
	jobTimedOutState  = "TIMED_OUT"
	jobCanceledState  = "CANCELED"
	jobErrorState     = "ERROR_THROWN"
	jobRetriesState   = "RETRIES_UPDATED"
)

// exportJob exports a job's state after an event; a job that ended
// (completed, canceled, its error caught) counts against the history.
func (p *partition) exportJob(j *job, state string, ended bool) {
	r := search.Jobs
	ei := j.elem
	t := now()
	j.searchState = state
	it := search.NewItem(r).
		Set(r, "jobKey", search.KeyValue(j.key)).
		Set(r, "type", search.StringValue(j.typ)).
		Set(r, "state", search.EnumValue(state)).
		Set(r, "retries", search.IntValue(int64(j.retries))).
		Set(r, "kind", search.EnumValue("BPMN_ELEMENT")).
		Set(r, "listenerEventType", search.EnumValue("UNSPECIFIED")).
		Set(r, "customHeaders", search.RawValue("{}")).
		Set(r, "processInstanceKey", search.KeyValue(ei.inst.key)).
		Set(r, "processDefinitionId", search.StringValue(ei.inst.proc.id)).
		Set(r, "processDefinitionKey", search.KeyValue(ei.inst.proc.key)).
		Set(r, "elementId", search.StringValue(ei.el.ID)).
		Set(r, "elementInstanceKey", search.KeyValue(ei.key)).
		Set(r, "tenantId", search.StringValue(defaultTenant)).
		Set(r, "worker", search.StringValue(j.worker)).
		Set(r, "hasFailedWithRetriesLeft", search.BoolValue(state == jobFailedState && j.retries > 0)).
		Set(r, "creationTime", search.DateValue(j.created)).
		Set(r, "lastUpdateTime", search.DateValue(t))
	if j.state == jobStateActivated {
		it = it.Set(r, "deadline", search.DateValue(j.deadline))
	}
	if j.errorMessage != "" {
		it = it.Set(r, "errorMessage", search.StringValue(j.errorMessage))
	}
	if ended {
		it = it.Set(r, "endTime", search.DateValue(t))
		p.exp.end(expJobs, j.key, it, nil)
		return
	}
	p.exp.put(expJobs, j.key, it)
}

func (p *partition) exportIncident(inc *incident, resolved bool) {
	r := search.Incidents
	ei := inc.elem
	state := "ACTIVE"
	if resolved {
		state = "RESOLVED"
	}
	it := search.NewItem(r).
		Set(r, "incidentKey", search.KeyValue(inc.key)).
		Set(r, "errorType", search.EnumValue(inc.kind.String())).
		Set(r, "errorMessage", search.StringValue(inc.message())).
		Set(r, "elementId", search.StringValue(ei.el.ID)).
		Set(r, "elementInstanceKey", search.KeyValue(ei.key)).
		Set(r, "processInstanceKey", search.KeyValue(ei.inst.key)).
		Set(r, "processDefinitionId", search.StringValue(ei.inst.proc.id)).
		Set(r, "processDefinitionKey", search.KeyValue(ei.inst.proc.key)).
		Set(r, "creationTime", search.DateValue(inc.created)).
		Set(r, "state", search.EnumValue(state)).
		Set(r, "tenantId", search.StringValue(defaultTenant))
	if inc.job != nil {
		it = it.Set(r, "jobKey", search.KeyValue(inc.job.key))
	}
	if resolved {
		p.exp.end(expIncidents, inc.key, it, nil)
		return
	}
	p.exp.put(expIncidents, inc.key, it)
}

// exportElement exports an element instance that waits (a task, a catch
// event, a gateway held by an incident): those are the ones a search of
// active elements finds; elements a token passes through in one record
// are not exported. state ACTIVE keeps it; COMPLETED or TERMINATED ends
// it.
func (p *partition) exportElement(ei *elementInstance, state string) {
	r := search.ElementInstances
	it := search.NewItem(r).
		Set(r, "elementInstanceKey", search.KeyValue(ei.key)).
		Set(r, "processInstanceKey", search.KeyValue(ei.inst.key)).
		Set(r, "processDefinitionKey", search.KeyValue(ei.inst.proc.key)).
		Set(r, "processDefinitionId", search.StringValue(ei.inst.proc.id)).
		Set(r, "elementId", search.StringValue(ei.el.ID)).
		Set(r, "elementName", search.StringValue(ei.el.ID)).
		Set(r, "type", search.EnumValue(ei.el.Kind.BpmnElementType())).
		Set(r, "state", search.EnumValue(state)).
		Set(r, "hasIncident", search.BoolValue(ei.incident != nil)).
		Set(r, "startDate", search.DateValue(ei.started)).
		Set(r, "tenantId", search.StringValue(defaultTenant))
	if ei.incident != nil {
		it = it.Set(r, "incidentKey", search.KeyValue(ei.incident.key))
	}
	if state == "ACTIVE" {
		p.exp.put(expElements, ei.key, it)
		return
	}
	p.exp.end(expElements, ei.key, it.Set(r, "endDate", search.DateValue(now())), nil)
}

// exportVariables exports an instance's variables named in names (all of
// them when names is nil), giving each new one its key.
func (p *partition) exportVariables(inst *instance, names map[string]any) {
	if len(names) == 0 {
		return
	}
	r := search.Variables
	if inst.varKeys == nil {
		inst.varKeys = map[string]int64{}
	}
	for name := range names {
		k, ok := inst.varKeys[name]
		if !ok {
			k = p.keys.next()
			inst.varKeys[name] = k
		}
		value, err := marshalJSON(inst.vars[name])
		if err != nil {
			value = "null"
		}
		p.exp.put(expVariables, k, search.NewItem(r).
			Set(r, "variableKey", search.KeyValue(k)).
			Set(r, "name", search.StringValue(name)).
			Set(r, "value", search.StringValue(value)).
			Set(r, "isTruncated", search.BoolValue(false)).
			Set(r, "scopeKey", search.KeyValue(inst.key)).
			Set(r, "processInstanceKey", search.KeyValue(inst.key)).
			Set(r, "tenantId", search.StringValue(defaultTenant)))
	}
}
