package registryapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/shardctl/shardctl/internal/physicaltenant"
)

// Application is one app and its instances.
type Application struct {
	Name      string
	Instances []*Instance
}

// Applications is a full or delta fetch.
type Applications struct {
	VersionsDelta string
	AppsHashcode  string
	Applications  []Application
}

// StaleHeader is on every read a replica cut off from etcd answers: the
// seconds since its view was last known to be etcd's.
const StaleHeader = "Shardctl-Stale-Seconds"

// Errors the HTTP layer maps to status codes.
var (
	ErrNotFound = errors.New("not found")
	ErrConflict = errors.New("conflict")
	// ErrUnavailable is a request the registry cannot serve now: etcd does
	// not answer (HTTP 503).
	ErrUnavailable = errors.New("unavailable")
	// ErrNotLoaded answers every request to a replica over etcd before
	// its first load.
	ErrNotLoaded = fmt.Errorf("%w: this replica has not loaded the registry from etcd yet", ErrUnavailable)
	// ErrLeased is a write refused because another holder's lease runs
	// (HTTP 423 Locked).
	ErrLeased = errors.New("Leased")
)

// Actions of a change, as Eureka names them.
const (
	ActionAdded    = "ADDED"
	ActionModified = "MODIFIED"
	ActionDeleted  = "DELETED"
	// ActionLedger is shardctl's: the deployment ledger changed.
	ActionLedger = "LEDGER"
	// ActionCutover is shardctl's: a cutover record was written.
	ActionCutover = "CUTOVER"
)

// Metadata keys the registry gives meaning to (shardctl's, not Eureka's).
const (
	MetaSlot   = "slot"
	MetaPool   = "pool"
	MetaStatic = "shardctl.static" // "true": registered by an operator, never expires
)

// DefaultShardsApp is the registry application whose instances are the
// federation's shards, unless --shards-app / --app say otherwise.
const DefaultShardsApp = "ZEEBE-SHARDS"

// ProxiesApp is the application the proxies that follow a registry
// register in, with their admin address, so that tools can ask each what
// it sees of the shards.
const ProxiesApp = "SHARDCTL-PROXY"

// Group sorts instances (sorted by app) into applications.
func Group(ins []*Instance) []Application {
	var apps []Application
	for _, in := range ins {
		if len(apps) == 0 || apps[len(apps)-1].Name != in.App {
			apps = append(apps, Application{Name: in.App})
		}
		apps[len(apps)-1].Instances = append(apps[len(apps)-1].Instances, in)
	}
	return apps
}

// Hashcode is Eureka's apps__hashcode: counts by status, in name order.
func Hashcode(ins []*Instance) string {
	counts := map[Status]int{}
	for _, in := range ins {
		counts[in.EffectiveStatus()]++
	}
	var b strings.Builder
	for _, st := range statusOrder {
		if n := counts[st]; n > 0 {
			fmt.Fprintf(&b, "%s_%d_", st, n)
		}
	}
	return b.String()
}

// Health is the registry's own state, for `shards list` and monitoring.
type Health struct {
	Version                   uint64  `json:"version"`
	Instances                 int     `json:"instances"`
	SelfPreservationEnabled   bool    `json:"selfPreservationEnabled"`
	SelfPreserving            bool    `json:"selfPreserving"`
	ExpectedRenewalsPerMinute float64 `json:"expectedRenewalsPerMinute"`
	RenewalThreshold          float64 `json:"renewalThresholdPerMinute"`
	RenewalsLastMinute        float64 `json:"renewalsLastMinute"`
	Evicted                   int64   `json:"evicted"`
	Deployments               int     `json:"deployments"`
	// Replica is this replica's view of the others, over etcd.
	Replica *ReplicaStatus `json:"replica,omitempty"`
}

// statusOrder is the order of apps__hashcode: status names sorted.
var statusOrder = []Status{StatusDown, StatusOutOfService, StatusStarting, StatusUnknown, StatusUp}

// Shard states, as docs/architecture.md names them.
const (
	StateUp           = "UP"
	StateDraining     = "DRAINING"
	StateOutOfService = "OUT_OF_SERVICE"
	StateDown         = "DOWN"
	StateStarting     = "STARTING"
)

// Shard is an instance of the shards app as shardctl reads it.
type Shard struct {
	ID               string            `json:"id"`
	App              string            `json:"app"`
	Address          string            `json:"address"`
	Slot             int               `json:"slot"`
	Pool             string            `json:"pool,omitempty"`
	State            string            `json:"state"`
	Status           Status            `json:"status"`
	OverriddenStatus Status            `json:"overriddenStatus,omitempty"`
	Static           bool              `json:"static,omitempty"`
	LastRenewal      time.Time         `json:"lastRenewal"`
	LeaseExpires     *time.Time        `json:"leaseExpires,omitempty"`
	Metadata         map[string]string `json:"metadata,omitempty"`
}

// MetaAddress overrides the gateway address (default ipAddr:port).
const MetaAddress = "address"

// ShardOf reads an instance as a shard, with the operator's override.
func ShardOf(in *Instance, o Override) Shard {
	s := Shard{
		ID: in.InstanceID, App: in.App, Pool: in.Metadata[MetaPool], Status: in.Status,
		Static: in.Metadata[MetaStatic] == "true", Metadata: in.Metadata,
		LastRenewal: time.UnixMilli(in.LeaseInfo.LastRenewalTimestamp).UTC(),
	}
	if in.OverriddenStatus != StatusUnknown {
		s.OverriddenStatus = in.OverriddenStatus
	}
	s.Slot, _ = strconv.Atoi(in.Metadata[MetaSlot])
	s.Address = in.Metadata[MetaAddress]
	if s.Address == "" {
		host := in.IPAddr
		if host == "" {
			host = in.HostName
		}
		s.Address = net.JoinHostPort(host, strconv.Itoa(in.Port))
	}
	if !s.Static {
		exp := time.UnixMilli(in.LeaseInfo.LastRenewalTimestamp + int64(in.LeaseInfo.DurationInSecs)*1000).UTC()
		s.LeaseExpires = &exp
	}
	switch st := in.EffectiveStatus(); {
	case o.Draining:
		s.State = StateDraining
	case st == StatusUp:
		s.State = StateUp
	case st == StatusOutOfService:
		s.State = StateOutOfService
	case st == StatusStarting:
		s.State = StateStarting
	default:
		s.State = StateDown
	}
	return s
}

// ShardRegistration describes a shard for NewShardInstance.
type ShardRegistration struct {
	App, ID string
	Address string // the Zeebe gateway, HOST:PORT
	Pool    string
	Slot    int    // 0: the registry assigns one
	Metrics string // URL of its /metrics, if any
	REST    string // base URL of its REST API (/v2 below it), if any
	TLS     string // how a proxy connects to it: "" plain, "true" or "insecure" (MetaTLS)
	// Credential names the proxies' credential for it (MetaCredential).
	Credential string
	Admin      string // URL of a proxy's admin endpoints (/shards), if any
	Static     bool   // registered by an operator: never expires
	// PhysicalTenants it serves (8.10; nil: "default" only).
	PhysicalTenants []string
	// Status it registers with: UP (the default), or OUT_OF_SERVICE to be
	// held out of placement until an operator lets it in.
	Status Status
	// RenewalInterval and LeaseDuration of the heartbeat (0: Eureka's).
	RenewalInterval, LeaseDuration time.Duration
}

// NewShardInstance builds the Eureka instance of a shard.
func NewShardInstance(r ShardRegistration) (*Instance, error) {
	host, portText, err := net.SplitHostPort(r.Address)
	if err != nil {
		return nil, fmt.Errorf("shard address %q: want HOST:PORT", r.Address)
	}
	port, err := strconv.Atoi(portText)
	if err != nil || port <= 0 || port > 65535 {
		return nil, fmt.Errorf("shard address %q: bad port", r.Address)
	}
	if r.ID == "" {
		return nil, fmt.Errorf("a shard needs an id")
	}
	if r.Slot < 0 || r.Slot > 31 {
		return nil, fmt.Errorf("slot %d: want 1-31 (or 0 to let the registry pick)", r.Slot)
	}
	status := r.Status
	if status == "" {
		status = StatusUp
	}
	in := &Instance{
		InstanceID: r.ID, App: strings.ToUpper(r.App), HostName: host, IPAddr: host, Status: status,
		Port: port, PortEnabled: true, VIPAddress: strings.ToLower(r.App),
		DataCenterInfo: DataCenterInfo{Class: "com.netflix.appinfo.InstanceInfo$DefaultDataCenterInfo", Name: "MyOwn"},
		LeaseInfo: LeaseInfo{
			RenewalIntervalInSecs: int(r.RenewalInterval / time.Second),
			DurationInSecs:        int(r.LeaseDuration / time.Second),
		},
		Metadata: map[string]string{},
	}
	if r.Pool != "" {
		in.Metadata[MetaPool] = r.Pool
	}
	if r.Slot != 0 {
		in.Metadata[MetaSlot] = strconv.Itoa(r.Slot)
	}
	if r.Metrics != "" {
		in.Metadata[MetaMetrics] = r.Metrics
	}
	if r.REST != "" {
		if err := CheckREST(r.REST); err != nil {
			return nil, err
		}
		in.Metadata[MetaREST] = r.REST
	}
	if len(r.PhysicalTenants) > 0 {
		for _, t := range r.PhysicalTenants {
			if err := physicaltenant.Check(t); err != nil {
				return nil, err
			}
		}
		in.Metadata[MetaPhysicalTenants] = physicaltenant.Format(r.PhysicalTenants)
	}
	switch r.TLS {
	case "", "false":
	case "true", "insecure":
		in.Metadata[MetaTLS] = r.TLS
	default:
		return nil, fmt.Errorf("shard TLS %q: want true, insecure or false", r.TLS)
	}
	if r.Credential != "" {
		if err := CheckCredentialName(r.Credential); err != nil {
			return nil, err
		}
		in.Metadata[MetaCredential] = r.Credential
	}
	if r.Static {
		in.Metadata[MetaStatic] = "true"
	}
	if r.Admin != "" {
		in.Metadata[MetaAdmin] = r.Admin
	}
	return in, nil
}

// Cutover phases. Done, RolledBack and Failed are final.
const (
	PhasePending     = "Pending"
	PhaseProgressing = "Progressing"
	PhasePaused      = "Paused"
	PhaseDraining    = "Draining"
	PhaseDone        = "Done"
	PhaseRolledBack  = "RolledBack"
	PhaseFailed      = "Failed"
)

// Final reports whether a phase ends a cutover.
func Final(phase string) bool {
	return phase == PhaseDone || phase == PhaseRolledBack || phase == PhaseFailed
}

// Cutover is the record of one cutover.
type Cutover struct {
	Name string `json:"name"`
	App  string `json:"app"`
	From string `json:"from"`
	To   string `json:"to"`
	// Weights are each pool's share of new instances, in percent. The
	// proxy places new instances only in the pools named, by weight.
	Weights map[string]int `json:"weights"`
	Phase   string         `json:"phase"`
	// Step is how many steps of the plan are complete.
	Step    int    `json:"step"`
	Message string `json:"message,omitempty"`
	// Spec is the plan the apply runs and Status what it saw, as the
	// migrate package writes them.
	Spec   json.RawMessage `json:"spec,omitempty"`
	Status json.RawMessage `json:"status,omitempty"`
	// Holder holds the lease until LeaseExpires: writes from anyone else
	// are refused meanwhile.
	Holder       string     `json:"holder,omitempty"`
	LeaseExpires *time.Time `json:"leaseExpires,omitempty"`
	// Version counts the record's writes: a write names the version it
	// read, and is refused if the record moved on since.
	Version   uint64    `json:"version"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// Clone copies a record, so that one handed out is never changed.
func (c Cutover) Clone() Cutover {
	c.Weights = maps.Clone(c.Weights)
	c.Spec = slices.Clone(c.Spec)
	c.Status = slices.Clone(c.Status)
	if c.LeaseExpires != nil {
		t := *c.LeaseExpires
		c.LeaseExpires = &t
	}
	return c
}

// Leased reports whether someone other than holder holds the lease now.
func (c Cutover) Leased(holder string, now time.Time) bool {
	return c.Holder != "" && c.Holder != holder && c.LeaseExpires != nil && now.Before(*c.LeaseExpires)
}

// LeaseError is a write or a lease refused because another holder's
// lease still runs.
type LeaseError struct {
	Cutover, Holder string
	Until           time.Time
}

func (e *LeaseError) Error() string {
	return fmt.Sprintf("%v: cutover %s is held by %s until %s", ErrLeased, e.Cutover, e.Holder, e.Until.UTC().Format(time.RFC3339))
}

func (e *LeaseError) Unwrap() error { return ErrLeased }

// FormatWeights renders pool weights for a log line, pools in order:
// "blue=90 green=10", or "none" when new instances go to every pool alike.
func FormatWeights(w map[string]int) string {
	if len(w) == 0 {
		return "none"
	}
	parts := make([]string, 0, len(w))
	for _, pool := range slices.Sorted(maps.Keys(w)) {
		parts = append(parts, fmt.Sprintf("%s=%d", pool, w[pool]))
	}
	return strings.Join(parts, " ")
}

// WatchEvent is one message of a watch.
type WatchEvent struct {
	Version uint64   `json:"version"`
	Action  string   `json:"action,omitempty"` // ADDED, MODIFIED, DELETED, LEDGER, CUTOVER
	Ledger  int      `json:"ledger,omitempty"` // LEDGER: the deployment's seq
	Shard   *Shard   `json:"shard,omitempty"`
	Cutover *Cutover `json:"cutover,omitempty"` // CUTOVER: the record as written
	Reset   bool     `json:"reset,omitempty"`
	Shards  []Shard  `json:"shards,omitempty"` // with Reset: the whole app
	// Cutovers come with Reset: every cutover record of the app.
	Cutovers []Cutover `json:"cutovers,omitempty"`
}

// PollAnswer is the answer to a long-poll watch.
type PollAnswer struct {
	Version uint64       `json:"version"`
	Events  []WatchEvent `json:"events"`
}

// ReplicaStatus is a replica's view of the replicas, for /readyz,
// /shardctl/v1/status and `shards list -o wide`.
type ReplicaStatus struct {
	ID string `json:"id"`
	// Coordinator is the replica that evicts ("" while none is elected).
	Coordinator   string   `json:"coordinator"`
	IsCoordinator bool     `json:"isCoordinator"`
	Members       []string `json:"members"`
	// Coordinators is the preference list ([] when any replica may).
	Coordinators []string `json:"coordinators"`
	// Staleness is how far behind etcd this replica's view may be.
	Staleness string `json:"staleness"`
	CutOff    bool   `json:"cutOff"`
	Revision  int64  `json:"revision"`
}

// Override is what an operator set on an instance; it outlives the
// instance's own re-registrations, as Eureka's overridden status does.
type Override struct {
	Status   Status `json:"status,omitempty"`
	Draining bool   `json:"draining,omitempty"`
}

func (o Override) Zero() bool { return o == Override{} }

// MetaMetrics is the URL of a shard's /metrics.
const MetaMetrics = "metrics"

// MetaREST is the base URL of a shard's REST API (/v2 below it).
const MetaREST = "rest"

// CheckREST checks a shard's REST API address (MetaREST).
func CheckREST(base string) error {
	if u, err := url.Parse(base); err != nil || u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return fmt.Errorf("REST API %q: want http://HOST:PORT or https://HOST:PORT", base)
	}
	return nil
}

// MetaPhysicalTenants lists the 8.10 physical tenants a shard serves,
// comma-separated (absent: "default" only).
const MetaPhysicalTenants = "physicalTenants"

// PhysicalTenants are the physical tenants a shard's metadata says it
// serves (nil: "default" only). The registry refuses a list that does
// not parse (CheckPhysicalTenants), so none is read here.
func PhysicalTenants(meta map[string]string) []string {
	list, _ := physicaltenant.Parse(meta[MetaPhysicalTenants])
	return list
}

// CheckPhysicalTenants says what is wrong with a shard's list of physical
// tenants, if anything.
func CheckPhysicalTenants(meta map[string]string) error {
	_, err := physicaltenant.Parse(meta[MetaPhysicalTenants])
	return err
}

// MetaTLS says how a proxy connects to a shard: absent in plain text,
// "true" over TLS checked against the proxy's --upstream-ca, "insecure"
// over TLS unchecked.
const MetaTLS = "tls"

// MetaCredential names the credential a proxy's own calls to a shard
// carry: one each proxy's configuration defines (credentials: in its
// file), never the secret itself; absent, the proxy's "default" one.
const MetaCredential = "credential"

// CheckCredentialName refuses what cannot be a credential's name: a
// secret pasted where its name belongs would show in every listing.
func CheckCredentialName(name string) error {
	if len(name) > 63 || !credentialName.MatchString(name) {
		return fmt.Errorf("credential name %q: want at most 63 of a-z, 0-9 and '-', starting with a letter (the name a proxy's configuration gives it, never the secret)", name)
	}
	return nil
}

var credentialName = regexp.MustCompile(`^[a-z]([a-z0-9-]*[a-z0-9])?$`)

// MetaAdmin is the URL of a proxy's admin endpoints.
const MetaAdmin = "admin"

// MaxLedgerBody bounds a ledger entry or the whole ledger on the wire, both
// ways: an entry carries BPMN files.
const MaxLedgerBody = 64 << 20

// InstanceRef names an instance: its app (upper case) and id.
type InstanceRef struct{ App, ID string }

// ReadTokenFile reads a bearer token from a file ("" reads nothing).
func ReadTokenFile(path string) (string, error) {
	if path == "" {
		return "", nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("token file %s is empty", path)
	}
	return tok, nil
}
