package search

import "strings"

// Kind is how a field's value reads, compares and prints.
type Kind uint8

const (
	// String is text compared byte by byte (an Elasticsearch keyword).
	String Kind = iota + 1
	// Key is a Zeebe key: a decimal string in JSON, compared as a number.
	Key
	// Int is a JSON number (int32 in the spec).
	Int
	// Date is an RFC 3339 date-time, compared by its instant in
	// milliseconds.
	Date
	// Bool is true or false.
	Bool
	// Enum is text from a closed set.
	Enum
	// Raw is any other JSON value (an array, an object): carried, never
	// filtered or sorted by.
	Raw
)

// Ops is the set of filter operators a field takes.
type Ops uint16

const (
	OpEq Ops = 1 << iota
	OpNeq
	OpExists
	OpIn
	OpNotIn
	OpLike
	OpRange // $gt, $gte, $lt, $lte

	// Plain takes a bare value only (an exact match), as the spec's
	// plain-typed filter properties do.
	Plain Ops = 1 << 15
)

// The operator sets of the spec's filter property schemas. Where 8.9
// widened a set (the incident filter became advanced, enums took
// $notIn), the wider one is taken: the clients of 8.9 and 8.10 (c8ctl
// among them) send those forms, and an 8.8 client never sends more
// than the narrower set.
const (
	StringOps = OpEq | OpNeq | OpExists | OpIn | OpNotIn | OpLike
	KeyOps    = OpEq | OpNeq | OpExists | OpIn | OpNotIn
	IntOps    = OpEq | OpNeq | OpExists | OpIn | OpRange
	DateOps   = OpEq | OpNeq | OpExists | OpIn | OpRange
	EnumOps   = OpEq | OpNeq | OpExists | OpIn | OpNotIn | OpLike
)

// Field is one property of a resource's items.
type Field struct {
	Name string
	Kind Kind
	// Filter is the operators the filter takes for it (0: not a filter
	// property).
	Filter Ops
	// Sort says whether it is one of the sort fields.
	Sort bool
	// Values is an Enum's closed set.
	Values []string
	// Hidden fields are filtered by but not in the items (a process
	// definition's isLatestVersion).
	Hidden bool
	// Nullable fields are in every item, null when absent: 8.9's spec
	// requires them, and its SDK's strict validation refuses an item
	// without them.
	Nullable bool
}

// Resource is one searchable resource of /v2.
type Resource struct {
	// Path is its segment in /v2/<path>/search and /v2/<path>/{key}.
	Path string
	// Entity names it in a "not found" detail ("Process Instance").
	Entity string
	// Key is the field holding the entity key: the tie-breaker of every
	// order and the last value of every cursor.
	Key string
	// Get says whether GET /v2/<path>/{key} exists (jobs have none).
	Get bool
	// Or says whether the filter takes $or, a list of field groups.
	Or bool
	// Unsupported are filter properties of the spec that shardctl does
	// not evaluate or translate: a search naming one is refused rather
	// than answered as if it were not there.
	Unsupported []string
	Fields      []Field

	index map[string]int
	key   int
}

// Field returns the index of the field named name, or -1.
func (r *Resource) Field(name string) int {
	if i, ok := r.index[name]; ok {
		return i
	}
	return -1
}

// KeyField is the index of the entity key.
func (r *Resource) KeyField() int { return r.key }

func (r *Resource) sortNames() string {
	var names []string
	for _, f := range r.Fields {
		if f.Sort {
			names = append(names, f.Name)
		}
	}
	return strings.Join(names, ", ")
}

func newResource(r Resource) *Resource {
	r.index = make(map[string]int, len(r.Fields))
	for i, f := range r.Fields {
		r.index[f.Name] = i
	}
	r.key = r.index[r.Key]
	return &r
}

var (
	processInstanceStates = []string{"ACTIVE", "COMPLETED", "TERMINATED"}
	jobStates             = []string{"CANCELED", "COMPLETED", "CREATED", "ERROR_THROWN", "FAILED", "MIGRATED", "RETRIES_UPDATED", "TIMED_OUT"}
	jobKinds              = []string{"BPMN_ELEMENT", "EXECUTION_LISTENER", "TASK_LISTENER", "AD_HOC_SUB_PROCESS"}
	listenerEventTypes    = []string{"ASSIGNING", "CANCELING", "COMPLETING", "CREATING", "END", "START", "UNSPECIFIED", "UPDATING", "BEFORE_ALL", "CANCEL"}
	elementInstanceStates = []string{"ACTIVE", "COMPLETED", "TERMINATED"}
	elementTypes          = []string{"UNSPECIFIED", "PROCESS", "SUB_PROCESS", "EVENT_SUB_PROCESS", "AD_HOC_SUB_PROCESS", "START_EVENT",
		"INTERMEDIATE_CATCH_EVENT", "INTERMEDIATE_THROW_EVENT", "BOUNDARY_EVENT", "END_EVENT", "SERVICE_TASK", "RECEIVE_TASK", "USER_TASK",
		"MANUAL_TASK", "TASK", "EXCLUSIVE_GATEWAY", "INCLUSIVE_GATEWAY", "PARALLEL_GATEWAY", "EVENT_BASED_GATEWAY", "SEQUENCE_FLOW",
		"MULTI_INSTANCE_BODY", "CALL_ACTIVITY", "BUSINESS_RULE_TASK", "SCRIPT_TASK", "SEND_TASK", "UNKNOWN"}
	incidentStates     = []string{"ACTIVE", "MIGRATED", "RESOLVED", "PENDING", "UNKNOWN"}
	incidentErrorTypes = []string{"UNSPECIFIED", "UNKNOWN", "IO_MAPPING_ERROR", "JOB_NO_RETRIES", "EXECUTION_LISTENER_NO_RETRIES",
		"TASK_LISTENER_NO_RETRIES", "AD_HOC_SUB_PROCESS_NO_RETRIES", "CONDITION_ERROR", "EXTRACT_VALUE_ERROR", "CALLED_ELEMENT_ERROR",
		"UNHANDLED_ERROR_EVENT", "MESSAGE_SIZE_EXCEEDED", "CALLED_DECISION_ERROR", "DECISION_EVALUATION_ERROR", "FORM_NOT_FOUND", "RESOURCE_NOT_FOUND"}
)

// The searchable resources, as Camunda 8.8's spec has them (with 8.9's
// job creation and update times, which c8ctl filters by). Element
// instances are what a stuck drain reads to say where instances wait.
var (
	ProcessInstances = newResource(Resource{
		Path: "process-instances", Entity: "Process Instance", Key: "processInstanceKey", Get: true, Or: true,
		Unsupported: []string{"variables", "tags", "batchOperationId", "errorMessage", "hasRetriesLeft", "elementInstanceState",
			"elementId", "hasElementInstanceIncident", "incidentErrorHashCode"},
		Fields: []Field{
			{Name: "processDefinitionId", Kind: String, Filter: StringOps, Sort: true},
			{Name: "processDefinitionName", Kind: String, Filter: StringOps, Sort: true},
			{Name: "processDefinitionVersion", Kind: Int, Filter: IntOps, Sort: true},
			{Name: "processDefinitionVersionTag", Kind: String, Filter: StringOps, Sort: true, Nullable: true},
			{Name: "processDefinitionKey", Kind: Key, Filter: KeyOps, Sort: true},
			{Name: "processInstanceKey", Kind: Key, Filter: KeyOps, Sort: true},
			{Name: "parentProcessInstanceKey", Kind: Key, Filter: KeyOps, Sort: true, Nullable: true},
			{Name: "parentElementInstanceKey", Kind: Key, Filter: KeyOps, Sort: true, Nullable: true},
			{Name: "rootProcessInstanceKey", Kind: Key, Nullable: true},
			{Name: "businessId", Kind: String, Filter: StringOps, Sort: true, Nullable: true},
			{Name: "startDate", Kind: Date, Filter: DateOps, Sort: true},
			{Name: "endDate", Kind: Date, Filter: DateOps, Sort: true, Nullable: true},
			{Name: "state", Kind: Enum, Filter: EnumOps, Sort: true, Values: processInstanceStates},
			{Name: "hasIncident", Kind: Bool, Filter: Plain, Sort: true},
			{Name: "tenantId", Kind: String, Filter: StringOps, Sort: true},
			{Name: "tags", Kind: Raw},
		},
	})
	Jobs = newResource(Resource{
		Path: "jobs", Entity: "Job", Key: "jobKey",
		Fields: []Field{
			{Name: "customHeaders", Kind: Raw},
			{Name: "deadline", Kind: Date, Filter: DateOps, Sort: true, Nullable: true},
			{Name: "deniedReason", Kind: String, Filter: StringOps, Sort: true, Nullable: true},
			{Name: "elementId", Kind: String, Filter: StringOps, Sort: true},
			{Name: "elementInstanceKey", Kind: Key, Filter: KeyOps, Sort: true},
			{Name: "endTime", Kind: Date, Filter: DateOps, Sort: true, Nullable: true},
			{Name: "errorCode", Kind: String, Filter: StringOps, Sort: true, Nullable: true},
			{Name: "errorMessage", Kind: String, Filter: StringOps, Sort: true, Nullable: true},
			{Name: "hasFailedWithRetriesLeft", Kind: Bool, Filter: Plain, Sort: true},
			{Name: "isDenied", Kind: Bool, Filter: Plain, Sort: true, Nullable: true},
			{Name: "jobKey", Kind: Key, Filter: KeyOps, Sort: true},
			{Name: "kind", Kind: Enum, Filter: EnumOps, Sort: true, Values: jobKinds},
			{Name: "listenerEventType", Kind: Enum, Filter: EnumOps, Sort: true, Values: listenerEventTypes},
			{Name: "processDefinitionId", Kind: String, Filter: StringOps, Sort: true},
			{Name: "processDefinitionKey", Kind: Key, Filter: KeyOps, Sort: true},
			{Name: "processInstanceKey", Kind: Key, Filter: KeyOps, Sort: true},
			{Name: "retries", Kind: Int, Filter: IntOps, Sort: true},
			{Name: "state", Kind: Enum, Filter: EnumOps, Sort: true, Values: jobStates},
			{Name: "tenantId", Kind: String, Filter: StringOps, Sort: true},
			{Name: "type", Kind: String, Filter: StringOps, Sort: true},
			{Name: "worker", Kind: String, Filter: StringOps, Sort: true},
			{Name: "creationTime", Kind: Date, Filter: DateOps, Nullable: true},
			{Name: "lastUpdateTime", Kind: Date, Filter: DateOps, Nullable: true},
			{Name: "rootProcessInstanceKey", Kind: Key, Nullable: true},
		},
	})
	Incidents = newResource(Resource{
		Path: "incidents", Entity: "Incident", Key: "incidentKey", Get: true,
		Fields: []Field{
			{Name: "processDefinitionId", Kind: String, Filter: StringOps, Sort: true},
			{Name: "errorType", Kind: Enum, Filter: EnumOps, Sort: true, Values: incidentErrorTypes},
			{Name: "errorMessage", Kind: String, Filter: StringOps, Sort: true},
			{Name: "elementId", Kind: String, Filter: StringOps, Sort: true},
			{Name: "creationTime", Kind: Date, Filter: DateOps, Sort: true},
			{Name: "state", Kind: Enum, Filter: EnumOps, Sort: true, Values: incidentStates},
			{Name: "tenantId", Kind: String, Filter: StringOps, Sort: true},
			{Name: "incidentKey", Kind: Key, Filter: KeyOps, Sort: true},
			{Name: "processDefinitionKey", Kind: Key, Filter: KeyOps, Sort: true},
			{Name: "processInstanceKey", Kind: Key, Filter: KeyOps, Sort: true},
			{Name: "elementInstanceKey", Kind: Key, Filter: KeyOps, Sort: true},
			{Name: "jobKey", Kind: Key, Filter: KeyOps, Sort: true, Nullable: true},
			{Name: "rootProcessInstanceKey", Kind: Key, Nullable: true},
		},
	})
	ElementInstances = newResource(Resource{
		Path: "element-instances", Entity: "Element Instance", Key: "elementInstanceKey", Get: true,
		Fields: []Field{
			{Name: "processDefinitionId", Kind: String, Filter: StringOps, Sort: true},
			{Name: "startDate", Kind: Date, Filter: DateOps, Sort: true},
			{Name: "endDate", Kind: Date, Filter: DateOps, Sort: true, Nullable: true},
			{Name: "elementId", Kind: String, Filter: StringOps, Sort: true},
			{Name: "elementName", Kind: String, Filter: StringOps, Sort: true},
			{Name: "type", Kind: Enum, Filter: EnumOps, Sort: true, Values: elementTypes},
			{Name: "state", Kind: Enum, Filter: EnumOps, Sort: true, Values: elementInstanceStates},
			{Name: "hasIncident", Kind: Bool, Filter: Plain, Sort: true},
			{Name: "tenantId", Kind: String, Filter: StringOps, Sort: true},
			{Name: "elementInstanceKey", Kind: Key, Filter: KeyOps, Sort: true},
			{Name: "processInstanceKey", Kind: Key, Filter: KeyOps, Sort: true},
			{Name: "processDefinitionKey", Kind: Key, Filter: KeyOps, Sort: true},
			{Name: "incidentKey", Kind: Key, Filter: KeyOps, Sort: true, Nullable: true},
			{Name: "rootProcessInstanceKey", Kind: Key, Nullable: true},
		},
	})
	Variables = newResource(Resource{
		Path: "variables", Entity: "Variable", Key: "variableKey", Get: true,
		Fields: []Field{
			{Name: "name", Kind: String, Filter: StringOps, Sort: true},
			{Name: "value", Kind: String, Filter: StringOps, Sort: true},
			{Name: "tenantId", Kind: String, Filter: Plain, Sort: true},
			{Name: "isTruncated", Kind: Bool, Filter: Plain},
			{Name: "variableKey", Kind: Key, Filter: KeyOps, Sort: true},
			{Name: "scopeKey", Kind: Key, Filter: KeyOps, Sort: true},
			{Name: "processInstanceKey", Kind: Key, Filter: KeyOps, Sort: true},
			{Name: "rootProcessInstanceKey", Kind: Key, Nullable: true},
		},
	})
	ProcessDefinitions = newResource(Resource{
		Path: "process-definitions", Entity: "Process Definition", Key: "processDefinitionKey", Get: true,
		Fields: []Field{
			{Name: "name", Kind: String, Filter: StringOps, Sort: true},
			{Name: "resourceName", Kind: String, Filter: Plain, Sort: true},
			{Name: "version", Kind: Int, Filter: Plain, Sort: true},
			{Name: "versionTag", Kind: String, Filter: Plain, Sort: true, Nullable: true},
			{Name: "processDefinitionId", Kind: String, Filter: StringOps, Sort: true},
			{Name: "tenantId", Kind: String, Filter: Plain, Sort: true},
			{Name: "processDefinitionKey", Kind: Key, Filter: Plain, Sort: true},
			{Name: "hasStartForm", Kind: Bool, Filter: Plain},
			{Name: "isLatestVersion", Kind: Bool, Filter: Plain, Hidden: true},
		},
	})
)

// Resources are every searchable resource.
var Resources = []*Resource{ProcessInstances, Jobs, Incidents, ElementInstances, Variables, ProcessDefinitions}

// ByPath finds a resource by its path segment.
func ByPath(path string) *Resource {
	for _, r := range Resources {
		if r.Path == path {
			return r
		}
	}
	return nil
}
