// Package proxyapi is the proxy's admin API as its readers see it: the
// shard states and the JSON of GET /shards. It has no runtime behind it,
// so the probes, the TUI, migrate and the commands read a proxy without
// linking one. It imports nothing of this module.
package proxyapi

import (
	"fmt"
	"strings"
	"time"
)

// ShardsPath is where a proxy's admin listener serves Shards.
const ShardsPath = "/shards"

// State is a shard's state in the federation (docs/architecture.md).
type State string

const (
	// Up takes everything.
	Up State = "UP"
	// Draining takes no new instances but serves jobs and keys.
	Draining State = "DRAINING"
	// OutOfService takes nothing new.
	OutOfService State = "OUT_OF_SERVICE"
	// Down is set by health checks.
	Down State = "DOWN"
)

// ParseState reads a state name.
func ParseState(s string) (State, error) {
	switch st := State(strings.ToUpper(s)); st {
	case Up, Draining, OutOfService, Down:
		return st, nil
	}
	return "", fmt.Errorf("unknown shard state %q: use UP, DRAINING, OUT_OF_SERVICE or DOWN", s)
}

// Shards is the document GET /shards answers.
type Shards struct {
	Shards []ShardStatus `json:"shards"`
	// Weights are the pool weights new instances are placed by (absent:
	// no weights, every UP shard alike).
	Weights map[string]int `json:"weights,omitempty"`
}

// ShardStatus is one shard as GET /shards reports it.
type ShardStatus struct {
	ID      string `json:"id"`
	Slot    int    `json:"slot"`
	Address string `json:"address"`
	// State is what the proxy routes by: DOWN while its health checks
	// fail, else AssignedState (the registry's or the configuration's).
	State         State       `json:"state"`
	AssignedState State       `json:"assignedState"`
	Health        ShardHealth `json:"health"`
	Pool          string      `json:"pool,omitempty"`
	// Credential names what the proxy's own calls to it carry (absent:
	// nothing); never the secret.
	Credential string `json:"credential,omitempty"`
	// PhysicalTenants are the 8.10 physical tenants it serves (absent:
	// "default" only).
	PhysicalTenants []string `json:"physicalTenants,omitempty"`
	Partitions      int32    `json:"partitions"`
	InFlight        int64    `json:"inFlight"`
	// Connections are the HTTP/2 connections to it; MaxStreams the
	// concurrent calls per connection it advertised (absent: no limit).
	Connections int    `json:"connections"`
	MaxStreams  uint32 `json:"maxStreams,omitempty"`
	CoolingOff  bool   `json:"coolingOff"`
	Overloaded  bool   `json:"overloaded"`
	// Backlog is present for shards with a metrics URL.
	Backlog     *BacklogStatus `json:"backlog,omitempty"`
	LastError   string         `json:"lastError,omitempty"`
	LastErrorAt *time.Time     `json:"lastErrorAt,omitempty"`
}

// ShardHealth is what the proxy's health checks and outlier ejection
// make of a shard.
type ShardHealth struct {
	Up           bool       `json:"up"`
	Since        *time.Time `json:"since,omitempty"`
	Reason       string     `json:"reason,omitempty"`
	EjectedUntil *time.Time `json:"ejectedUntil,omitempty"`
	Ejections    int        `json:"ejections"`
	// Auth is set while the shard refuses the proxy's own calls for
	// their credential ("UNAUTHENTICATED: " or "PERMISSION_DENIED: " and
	// the shard's message, with why the proxy had no token when it had
	// none), since AuthSince. The shard answered: it is not DOWN for it,
	// but what needs the proxy's own calls (a ledger replay) waits.
	Auth      string     `json:"auth,omitempty"`
	AuthSince *time.Time `json:"authSince,omitempty"`
}

// A shard's admission, as BacklogStatus.State says it.
const (
	AdmissionOpen    = "admitting" // takes what it is offered
	AdmissionPaced   = "pacing"    // takes new instances up to a rate
	AdmissionRefused = "refusing"  // takes no new instance
)

// BacklogStatus is a shard's backlog as the proxy last read it from the
// shard's metrics, and what its admission made of it.
type BacklogStatus struct {
	// Records committed and not processed, summed over partitions.
	Records float64 `json:"records"`
	// Growing: linearly, by the signals' test, at Slope records/s.
	Growing bool    `json:"growing"`
	Slope   float64 `json:"slope"`
	// Admitting is false while the shard gets no new instances for its
	// backlog.
	Admitting bool      `json:"admitting"`
	Max       float64   `json:"max"`
	At        time.Time `json:"at"`
	// State is the shard's admission: AdmissionOpen, AdmissionPaced (new
	// instances up to AdmitRate a second) or AdmissionRefused (none: its
	// backlog, or its instance limit), with Reason saying why when it is
	// not open.
	State  string `json:"state"`
	Reason string `json:"reason,omitempty"`
	// QueueDelay is how long its records wait to be processed (seconds):
	// the stream processor's mean latency over the last interval, or the
	// records that stayed unprocessed ÷ the rate it processes them, the
	// longer. Over QueueTarget the shard is paced.
	QueueDelay  float64 `json:"queueDelay"`
	QueueTarget float64 `json:"queueTarget"`
	// Capacity is the most records a second it was measured to process
	// while it held a queue (0: never saturated lately), and
	// RecordsPerInstance the records each new instance brought, on
	// average: the pace is one over the other.
	Capacity           float64 `json:"capacity"`
	RecordsPerInstance float64 `json:"recordsPerInstance"`
	// AdmitRate is the most new instances a second this proxy gives it
	// (0: no bound): while paced, what keeps its queue at the target;
	// else, once its capacity is known, a ceiling above it.
	AdmitRate float64 `json:"admitRate"`
	// Instances are root instances in flight as last read, InstanceLimit
	// the most the shard is given (--instance-limit; 0: none), applied
	// while Congested: the log held records not processed at this reading
	// or the one before.
	Instances     float64 `json:"instances"`
	InstanceLimit int64   `json:"instanceLimit"`
	Congested     bool    `json:"congested"`
	// Error says why the backlog could not be read (the shard is then
	// admitted as before: missing data does not refuse work).
	Error string `json:"error,omitempty"`
}

// ShardConfig names one shard: what a proxy is told of it, by its flags,
// its configuration file or the registry.
type ShardConfig struct {
	ID    string `json:"id"`
	Addr  string `json:"address"`
	Slot  int    `json:"slot"`
	State State  `json:"state,omitempty"`
	// Pool is the group the shard belongs to (blue, green): pool weights
	// place new instances between pools.
	Pool string `json:"pool,omitempty"`
	// Metrics is the URL of the shard's /metrics, where the proxy reads
	// its backlog for admission ("" : no admission by backlog).
	Metrics string `json:"metrics,omitempty"`
	// REST is the base URL of the shard's REST API (/v2 below it), where
	// the proxy sends the searches it federates ("": the shard cannot be
	// searched, and a search that needs it fails).
	REST string `json:"rest,omitempty"`
	// PhysicalTenants are the 8.10 physical tenants the shard serves
	// (nil: "default" only, as every release before 8.10): new work for
	// a tenant is placed, fanned out and replayed only where it is served.
	PhysicalTenants []string `json:"physicalTenants,omitempty"`
	// TLS is how the proxy connects: "" or "false" in plain text, "true"
	// over TLS checked against the upstream CA, "insecure" over TLS
	// without checking the shard's certificate (tests, self-signed labs).
	TLS string `json:"tls,omitempty"`
	// Credential names the proxy's credential its own calls to the shard
	// carry (health checks, ledger replays, jobs handed back): one the
	// proxy's configuration defines, never a secret ("": the proxy's
	// "default" credential, if it has one). Clients' calls carry the
	// client's own.
	Credential string `json:"credential,omitempty"`
}
