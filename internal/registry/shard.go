package registry

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/shardctl/shardctl/internal/ledger"
)

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

// Shards lists the instances of app as shards, by slot.
func (r *Registry) Shards(app string) []Shard {
	app = strings.ToUpper(app)
	ins := r.Instances(app)
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]Shard, 0, len(ins))
	for _, in := range ins {
		out = append(out, ShardOf(in, r.overrides[InstanceRef{in.App, in.InstanceID}]))
	}
	return out
}

// shardOfChange reads a change's instance as a shard.
func (r *Registry) shardOfChange(in *Instance) Shard {
	r.mu.RLock()
	o := r.overrides[InstanceRef{in.App, in.InstanceID}]
	r.mu.RUnlock()
	return ShardOf(in, o)
}

// SetState sets a shard's state the way an operator means it: DRAINING
// and OUT_OF_SERVICE override the status the shard reports (Eureka
// clients see OUT_OF_SERVICE for both); UP removes the override, or, for
// a shard that registered itself OUT_OF_SERVICE (held out until an
// operator lets it in, as Eureka clients do), overrides it with UP.
func (r *Registry) SetState(app, id, state string) error {
	var o Override
	switch strings.ToUpper(state) {
	case StateUp:
		if in, err := r.Instance(app, id); err == nil && in.Status == StatusOutOfService {
			o = Override{Status: StatusUp}
		}
	case StateDraining:
		o = Override{Status: StatusOutOfService, Draining: true}
	case StateOutOfService:
		o = Override{Status: StatusOutOfService}
	case StateDown:
		o = Override{Status: StatusDown}
	default:
		return fmt.Errorf("state %q: expected UP, DRAINING, OUT_OF_SERVICE or DOWN", state)
	}
	return r.SetOverride(app, id, o)
}

// AppendDeployment adds a deployment to the ledger, numbering it.
func (r *Registry) AppendDeployment(d ledger.Deployment) (ledger.Deployment, error) {
	err := r.write(func(time.Time) (*Batch, error) {
		d.Seq = len(r.deployments) + 1
		return &Batch{Deployments: []ledger.Deployment{d.Clone()}}, nil
	})
	if err != nil {
		return ledger.Deployment{}, err
	}
	processes := make([]string, 0, len(d.Processes))
	for _, p := range d.Processes {
		processes = append(processes, ledger.ProcessRef(p.BpmnProcessID, p.Version))
	}
	r.log.Info("deployment added to the ledger", "seq", d.Seq, "processes", processes, "resources", len(d.Resources))
	return d, nil
}

// SetDeploymentKeys records the keys a shard issued when it was replayed
// a deployment.
func (r *Registry) SetDeploymentKeys(seq int, shardID string, keys map[string]int64) error {
	err := r.write(func(time.Time) (*Batch, error) {
		if seq < 1 || seq > len(r.deployments) {
			return nil, fmt.Errorf("%w: no deployment %d in the ledger", ErrNotFound, seq)
		}
		d := r.deployments[seq-1].Clone()
		d.SetKeys(shardID, keys)
		return &Batch{Deployments: []ledger.Deployment{d}}, nil
	})
	if err == nil {
		r.log.Debug("deployment replayed to a shard", "seq", seq, "shard", shardID, "processes", len(keys))
	}
	return err
}

// Deployments returns the ledger.
func (r *Registry) Deployments() []ledger.Deployment {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]ledger.Deployment, len(r.deployments))
	for i, d := range r.deployments {
		out[i] = d.Clone()
	}
	return out
}

// ShardRegistration describes a shard for NewShardInstance.
type ShardRegistration struct {
	App, ID string
	Address string // the Zeebe gateway, HOST:PORT
	Pool    string
	Slot    int    // 0: the registry assigns one
	Metrics string // URL of its /metrics, if any
	TLS     string // how a proxy connects to it: "" plain, "true" or "insecure" (MetaTLS)
	Admin   string // URL of a proxy's admin endpoints (/shards), if any
	Static  bool   // registered by an operator: never expires
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
	switch r.TLS {
	case "", "false":
	case "true", "insecure":
		in.Metadata[MetaTLS] = r.TLS
	default:
		return nil, fmt.Errorf("shard TLS %q: want true, insecure or false", r.TLS)
	}
	if r.Static {
		in.Metadata[MetaStatic] = "true"
	}
	if r.Admin != "" {
		in.Metadata[MetaAdmin] = r.Admin
	}
	return in, nil
}

// MetaMetrics is the URL of a shard's /metrics.
const MetaMetrics = "metrics"

// MetaTLS says how a proxy connects to a shard: absent in plain text,
// "true" over TLS checked against the proxy's --upstream-ca, "insecure"
// over TLS unchecked.
const MetaTLS = "tls"

// MetaAdmin is the URL of a proxy's admin endpoints.
const MetaAdmin = "admin"
