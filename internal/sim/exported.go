package sim

import (
	"cmp"
	"sync"
	"time"

	"github.com/shardctl/shardctl/internal/bpmn"
	"github.com/shardctl/shardctl/internal/search"
)

// DefaultQueryHistory is how many ended entities (instances, jobs,
// incidents, element instances) a partition keeps for searches.
const DefaultQueryHistory = 10000

// Resource indexes of a partition's exported rows.
const (
	expInstances = iota
	expJobs
	expIncidents
	expElements
	expVariables
	expResources
)

var exportedResource = [expResources]*search.Resource{search.ProcessInstances, search.Jobs, search.Incidents, search.ElementInstances, search.Variables}

// row is an exported entity as the partition last saw it: a small value
// copied into its table, made into a search item only when a search
// reads it, so that exporting costs the engine no allocation (items made
// at every change took a fifth of its throughput).
type row interface {
	fill(it search.Item)
}

// table holds one resource's rows by key.
type table[R row] map[int64]R

// rows is what the exported view does with any table.
type rows interface {
	matching(r *search.Resource, f search.Filter, out []search.Item) []search.Item
	item(r *search.Resource, key int64) (search.Item, bool)
	forget(key int64)
}

// matching fills one scratch item per row and keeps a copy of those the
// filter matches, their values cut from slabs of a few hundred items
// each rather than allocated one by one.
func (t table[R]) matching(r *search.Resource, f search.Filter, out []search.Item) []search.Item {
	const slabItems = 256
	n := len(r.Fields)
	scratch := search.NewItem(r)
	var slab []search.Value
	for _, row := range t {
		clear(scratch.Values)
		row.fill(scratch)
		if !f.Match(scratch) {
			continue
		}
		if len(slab) < n {
			slab = make([]search.Value, slabItems*n)
		}
		it := search.Item{Values: slab[:n:n]}
		slab = slab[n:]
		copy(it.Values, scratch.Values)
		out = append(out, it)
	}
	return out
}

func (t table[R]) item(r *search.Resource, key int64) (search.Item, bool) {
	row, ok := t[key]
	if !ok {
		return search.Item{}, false
	}
	it := search.NewItem(r)
	row.fill(it)
	return it, true
}

func (t table[R]) forget(key int64) { delete(t, key) }

// exported is what a partition has exported for queries: the simulator's
// stand-in for Zeebe's secondary storage (Elasticsearch behind Operate
// and the /v2 searches). The partition's goroutine writes it as it
// processes records; searches read it under the read lock.
type exported struct {
	mu        sync.RWMutex
	instances table[instanceRow]
	jobs      table[jobRow]
	incidents table[incidentRow]
	elements  table[elementRow]
	variables table[variableRow]
	all       [expResources]rows // the tables above, by resource index
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
	e := &exported{history: history, instances: table[instanceRow]{}, jobs: table[jobRow]{},
		incidents: table[incidentRow]{}, elements: table[elementRow]{}, variables: table[variableRow]{}}
	e.all = [expResources]rows{e.instances, e.jobs, e.incidents, e.elements, e.variables}
	return e
}

// put stores a row, under the write lock.
func put[R row](e *exported, t table[R], key int64, r R) {
	e.mu.Lock()
	t[key] = r
	e.mu.Unlock()
}

// end stores an entity's last row and counts it against the history.
func end[R row](e *exported, res int, t table[R], key int64, r R, vars []int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	t[key] = r
	e.ended = append(e.ended, endedRef{res: res, key: key, vars: vars})
	for len(e.ended) > e.history {
		old := e.ended[0]
		e.ended[0] = endedRef{}
		e.ended = e.ended[1:]
		e.all[old.res].forget(old.key)
		for _, v := range old.vars {
			e.variables.forget(v)
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
	return e.all[res].matching(exportedResource[res], f, out)
}

func (e *exported) get(res int, key int64) (search.Item, bool) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.all[res].item(exportedResource[res], key)
}

// unixMilli is a time as the rows keep it (0: none).
func unixMilli(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func dateOf(ms int64) search.Value {
	if ms == 0 {
		return search.Value{}
	}
	return search.Value{Kind: search.Date, N: ms}
}

// instanceRow is a process instance.
type instanceRow struct {
	key            int64
	proc           *process
	started, ended int64 // Unix ms
	state          string
	hasIncident    bool
	labels         instanceLabels
}

func (x instanceRow) fill(it search.Item) {
	r := search.ProcessInstances
	it.Set(r, "processInstanceKey", search.KeyValue(x.key)).
		Set(r, "processDefinitionId", search.StringValue(x.proc.id)).
		Set(r, "processDefinitionName", search.StringValue(x.proc.name())).
		Set(r, "processDefinitionVersion", search.IntValue(int64(x.proc.version))).
		Set(r, "processDefinitionKey", search.KeyValue(x.proc.key)).
		Set(r, "startDate", dateOf(x.started)).
		Set(r, "endDate", dateOf(x.ended)).
		Set(r, "state", search.EnumValue(x.state)).
		Set(r, "hasIncident", search.BoolValue(x.hasIncident)).
		Set(r, "tenantId", search.StringValue(defaultTenant)).
		Set(r, "tags", search.RawValue(cmp.Or(x.labels.tagsJSON, "[]")))
	if b := x.labels.businessID; b != nil {
		it.Set(r, "businessId", search.StringValue(*b))
	}
}

func (p *partition) exportInstance(inst *instance, state string, ended time.Time) {
	x := instanceRow{key: inst.key, proc: inst.proc, started: unixMilli(inst.started), ended: unixMilli(ended), state: state, hasIncident: inst.incidents > 0, labels: inst.labels}
	if ended.IsZero() {
		put(p.exp, p.exp.instances, inst.key, x)
		return
	}
	vars := make([]int64, 0, len(inst.varKeys))
	for _, k := range inst.varKeys {
		vars = append(vars, k)
	}
	end(p.exp, expInstances, p.exp.instances, inst.key, x, vars)
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

// jobRow is a job.
type jobRow struct {
	key, instance, element  int64
	proc                    *process
	elementID, typ, worker  string
	state, errorMessage     string
	retries                 int32
	deadline, created, last int64 // Unix ms
	ended                   int64
}

func (x jobRow) fill(it search.Item) {
	r := search.Jobs
	it.Set(r, "jobKey", search.KeyValue(x.key)).
		Set(r, "type", search.StringValue(x.typ)).
		Set(r, "state", search.EnumValue(x.state)).
		Set(r, "retries", search.IntValue(int64(x.retries))).
		Set(r, "kind", search.EnumValue("BPMN_ELEMENT")).
		Set(r, "listenerEventType", search.EnumValue("UNSPECIFIED")).
		Set(r, "customHeaders", search.RawValue("{}")).
		Set(r, "processInstanceKey", search.KeyValue(x.instance)).
		Set(r, "processDefinitionId", search.StringValue(x.proc.id)).
		Set(r, "processDefinitionKey", search.KeyValue(x.proc.key)).
		Set(r, "elementId", search.StringValue(x.elementID)).
		Set(r, "elementInstanceKey", search.KeyValue(x.element)).
		Set(r, "tenantId", search.StringValue(defaultTenant)).
		Set(r, "worker", search.StringValue(x.worker)).
		Set(r, "hasFailedWithRetriesLeft", search.BoolValue(x.state == jobFailedState && x.retries > 0)).
		Set(r, "creationTime", dateOf(x.created)).
		Set(r, "lastUpdateTime", dateOf(x.last)).
		Set(r, "deadline", dateOf(x.deadline)).
		Set(r, "endTime", dateOf(x.ended))
	if x.errorMessage != "" {
		it.Set(r, "errorMessage", search.StringValue(x.errorMessage))
	}
}

// exportJob exports a job's state after an event; a job that ended
// (completed, canceled, its error caught) counts against the history.
func (p *partition) exportJob(j *job, state string, ended bool) {
	ei := j.elem
	t := now().UnixMilli()
	j.searchState = state
	x := jobRow{key: j.key, instance: ei.inst.key, element: ei.key, proc: ei.inst.proc, elementID: ei.el.ID, typ: j.typ, worker: j.worker,
		state: state, errorMessage: j.errorMessage, retries: j.retries, created: unixMilli(j.created), last: t}
	if j.state == jobStateActivated {
		x.deadline = unixMilli(j.deadline)
	}
	if ended {
		x.ended = t
		end(p.exp, expJobs, p.exp.jobs, j.key, x, nil)
		return
	}
	put(p.exp, p.exp.jobs, j.key, x)
}

// incidentRow is an incident.
type incidentRow struct {
	key, instance, element, job int64
	proc                        *process
	elementID, kind, message    string
	created                     int64
	resolved                    bool
}

func (x incidentRow) fill(it search.Item) {
	r := search.Incidents
	state := "ACTIVE"
	if x.resolved {
		state = "RESOLVED"
	}
	it.Set(r, "incidentKey", search.KeyValue(x.key)).
		Set(r, "errorType", search.EnumValue(x.kind)).
		Set(r, "errorMessage", search.StringValue(x.message)).
		Set(r, "elementId", search.StringValue(x.elementID)).
		Set(r, "elementInstanceKey", search.KeyValue(x.element)).
		Set(r, "processInstanceKey", search.KeyValue(x.instance)).
		Set(r, "processDefinitionId", search.StringValue(x.proc.id)).
		Set(r, "processDefinitionKey", search.KeyValue(x.proc.key)).
		Set(r, "creationTime", dateOf(x.created)).
		Set(r, "state", search.EnumValue(state)).
		Set(r, "tenantId", search.StringValue(defaultTenant))
	if x.job != 0 {
		it.Set(r, "jobKey", search.KeyValue(x.job))
	}
}

func (p *partition) exportIncident(inc *incident, resolved bool) {
	ei := inc.elem
	x := incidentRow{key: inc.key, instance: ei.inst.key, element: ei.key, proc: ei.inst.proc, elementID: ei.el.ID,
		kind: inc.kind.String(), message: inc.message(), created: unixMilli(inc.created), resolved: resolved}
	if inc.job != nil {
		x.job = inc.job.key
	}
	if resolved {
		end(p.exp, expIncidents, p.exp.incidents, inc.key, x, nil)
		return
	}
	put(p.exp, p.exp.incidents, inc.key, x)
}

// elementRow is an element instance that waits.
type elementRow struct {
	key, instance, incident int64
	proc                    *process
	el                      *bpmn.Element
	state                   string
	started, ended          int64
}

func (x elementRow) fill(it search.Item) {
	r := search.ElementInstances
	it.Set(r, "elementInstanceKey", search.KeyValue(x.key)).
		Set(r, "processInstanceKey", search.KeyValue(x.instance)).
		Set(r, "processDefinitionKey", search.KeyValue(x.proc.key)).
		Set(r, "processDefinitionId", search.StringValue(x.proc.id)).
		Set(r, "elementId", search.StringValue(x.el.ID)).
		Set(r, "elementName", search.StringValue(x.el.ID)).
		Set(r, "type", search.EnumValue(x.el.Kind.BpmnElementType())).
		Set(r, "state", search.EnumValue(x.state)).
		Set(r, "hasIncident", search.BoolValue(x.incident != 0)).
		Set(r, "startDate", dateOf(x.started)).
		Set(r, "endDate", dateOf(x.ended)).
		Set(r, "tenantId", search.StringValue(defaultTenant))
	if x.incident != 0 {
		it.Set(r, "incidentKey", search.KeyValue(x.incident))
	}
}

// exportElement exports an element instance that waits (a task, a catch
// event, a gateway held by an incident): those are the ones a search of
// active elements finds; elements a token passes through in one record
// are not exported. state ACTIVE keeps it; COMPLETED or TERMINATED ends
// it.
func (p *partition) exportElement(ei *elementInstance, state string) {
	x := elementRow{key: ei.key, instance: ei.inst.key, proc: ei.inst.proc, el: ei.el, state: state, started: unixMilli(ei.started)}
	if ei.incident != nil {
		x.incident = ei.incident.key
	}
	if state == "ACTIVE" {
		put(p.exp, p.exp.elements, ei.key, x)
		return
	}
	x.ended = now().UnixMilli()
	end(p.exp, expElements, p.exp.elements, ei.key, x, nil)
}

// variableRow is a process instance's variable.
type variableRow struct {
	key, instance int64
	name, value   string
}

func (x variableRow) fill(it search.Item) {
	r := search.Variables
	it.Set(r, "variableKey", search.KeyValue(x.key)).
		Set(r, "name", search.StringValue(x.name)).
		Set(r, "value", search.StringValue(x.value)).
		Set(r, "isTruncated", search.BoolValue(false)).
		Set(r, "scopeKey", search.KeyValue(x.instance)).
		Set(r, "processInstanceKey", search.KeyValue(x.instance)).
		Set(r, "tenantId", search.StringValue(defaultTenant))
}

// exportVariables exports an instance's variables named in names, giving
// each new one its key.
func (p *partition) exportVariables(inst *instance, names map[string]any) {
	if len(names) == 0 {
		return
	}
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
		put(p.exp, p.exp.variables, k, variableRow{key: k, instance: inst.key, name: name, value: value})
	}
}
