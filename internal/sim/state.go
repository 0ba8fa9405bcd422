package sim

import (
	"encoding/json"
	"time"

	"github.com/shardctl/shardctl/internal/bpmn"
)

// state is everything a partition knows. Only its processing goroutine
// reads or writes it.
type state struct {
	instances map[int64]*instance
	elements  map[int64]*elementInstance // active element instances by key
	jobs      map[int64]*job
	incidents map[int64]*incident
	// activatable jobs by type, oldest first; entries go stale when a job
	// changes state and are skipped (seq mismatch) when popped.
	activatable map[string][]jobRef
	// jobs with a deadline or a backoff, checked by the timer.
	activated map[int64]*job
	backoff   map[int64]*job

	// Message side (this partition owns the correlation keys that hash to
	// it): buffered messages and open subscriptions by name + key.
	messages      map[msgKey][]*message
	buffered      int // messages in messages, as zeebe_buffered_messages_count
	messageIDs    map[msgIDKey]*message
	subscriptions map[msgKey][]*subscription
	// Instances started by a message with a correlation key, still active:
	// Zeebe starts no second one for the same process and key.
	messageStarted map[startKey]int64

	// Signal catch events waiting on this partition, by signal name.
	signalWaits map[string]map[int64]*elementInstance

	// Timer catch events waiting, earliest due first.
	timers timerHeap
	// An expireDue record is on the log: the due check writes no second
	// one while a backlog holds the first.
	expiryQueued bool
}

func newState() *state {
	return &state{
		instances:      map[int64]*instance{},
		elements:       map[int64]*elementInstance{},
		jobs:           map[int64]*job{},
		incidents:      map[int64]*incident{},
		activatable:    map[string][]jobRef{},
		activated:      map[int64]*job{},
		backoff:        map[int64]*job{},
		messages:       map[msgKey][]*message{},
		messageIDs:     map[msgIDKey]*message{},
		subscriptions:  map[msgKey][]*subscription{},
		messageStarted: map[startKey]int64{},
		signalWaits:    map[string]map[int64]*elementInstance{},
	}
}

type instance struct {
	key     int64
	proc    *process
	vars    map[string]any
	active  map[int64]*elementInstance
	joins   map[string]map[string]int // parallel gateway id -> incoming flow id -> tokens
	waiters []chan<- instanceResult   // CreateProcessInstanceWithResult
	// startedBy is set for an instance a message with a correlation key
	// started.
	startedBy *startKey
	labels    instanceLabels
	ended     bool
	started   time.Time
	incidents int              // open incidents, for the search's hasIncident
	varKeys   map[string]int64 // variable keys by name, given as variables are exported
	// tokens moving between elements in the current record, and tokens
	// waiting at parallel joins: the instance is done when both are zero
	// and no element waits.
	tokens      int
	joinWaiting int
}

// instanceLabels are what a creation names its instance by, since 8.8:
// tags (kept with their JSON, which every search row carries) and, since
// 8.10, a business id.
type instanceLabels struct {
	tags       []string
	tagsJSON   string // "" is []
	businessID *string
}

type instanceResult struct {
	vars map[string]any
	err  error
}

type elementInstance struct {
	key  int64
	el   *bpmn.Element
	inst *instance
	job  *job
	// An open message subscription (catch event) on partition subPartition.
	subPartition int32
	subName      string
	subKey       string
	timer        *timer // a timer catch event's wait
	incident     *incident
	started      time.Time
}

type jobState int

const (
	jobStateActivatable jobState = iota
	jobStateActivated
	jobStateFailed // waiting for a retry backoff
	jobStateIncident
	jobStateErrorThrown
)

func (s jobState) String() string {
	switch s {
	case jobStateActivatable:
		return "ACTIVATABLE"
	case jobStateActivated:
		return "ACTIVATED"
	case jobStateFailed:
		return "FAILED"
	case jobStateIncident:
		return "FAILED"
	case jobStateErrorThrown:
		return "ERROR_THROWN"
	}
	return "UNKNOWN"
}

type job struct {
	key          int64
	typ          string
	retries      int32
	state        jobState
	seq          uint64 // bumps on every queueing, so stale queue entries are skipped
	worker       string
	deadline     time.Time
	backoffUntil time.Time
	errorMessage string
	elem         *elementInstance
	created      time.Time
	searchState  string // the state the search last reported
}

type jobRef struct {
	job *job
	seq uint64
}

type incidentKind int

const (
	incidentJobNoRetries incidentKind = iota
	incidentUnhandledError
	incidentCondition
	incidentExtractValue
)

// String is Zeebe's error type name for the incident.
func (k incidentKind) String() string {
	switch k {
	case incidentJobNoRetries:
		return "JOB_NO_RETRIES"
	case incidentUnhandledError:
		return "UNHANDLED_ERROR_EVENT"
	case incidentCondition:
		return "CONDITION_ERROR"
	case incidentExtractValue:
		return "EXTRACT_VALUE_ERROR"
	}
	return "UNKNOWN"
}

type incident struct {
	key     int64
	kind    incidentKind
	elem    *elementInstance
	job     *job
	created time.Time
}

// message is the incident's error message as Operate shows it.
func (inc *incident) message() string {
	if inc.job != nil && inc.job.errorMessage != "" {
		return inc.job.errorMessage
	}
	switch inc.kind {
	case incidentJobNoRetries:
		return "No more retries left."
	case incidentCondition:
		return "Expected at least one condition to evaluate to true, or to have a default flow"
	case incidentExtractValue:
		return "Failed to extract the correlation key: the variable it names is missing or not a string or number"
	}
	return "An error was thrown and not caught"
}

type msgKey struct{ name, correlationKey string }
type msgIDKey struct{ name, correlationKey, id string }
type startKey struct{ processID, correlationKey string }

type message struct {
	key       int64
	name      string
	corrKey   string
	id        string
	vars      map[string]any
	expires   time.Time
	buffered  bool
	processes map[string]bool // bpmnProcessIds it has correlated to
}

// subscription is a catch event waiting, kept on the message's partition.
type subscription struct {
	processID   string
	partition   int32 // where the instance lives
	elementKey  int64
	instanceKey int64
}

func parseVariables(doc string) (map[string]any, error) {
	if doc == "" {
		return nil, nil
	}
	var v any
	if err := json.Unmarshal([]byte(doc), &v); err != nil {
		return nil, err
	}
	m, ok := v.(map[string]any)
	if !ok {
		if v == nil {
			return nil, nil
		}
		return nil, errNotObject
	}
	return m, nil
}

func filterVariables(vars map[string]any, names []string) map[string]any {
	if len(names) == 0 {
		return vars
	}
	out := make(map[string]any, len(names))
	for _, n := range names {
		if v, ok := vars[n]; ok {
			out[n] = v
		}
	}
	return out
}

// marshalJSON is a value as JSON text.
func marshalJSON(v any) (string, error) {
	b, err := json.Marshal(v)
	return string(b), err
}

func encodeVariables(vars map[string]any) string {
	if len(vars) == 0 {
		return "{}"
	}
	b, err := json.Marshal(vars)
	if err != nil {
		return "{}"
	}
	return string(b)
}
