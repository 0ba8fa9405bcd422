// Package health checks the parts of a federation the way their own
// readiness says: a Zeebe gateway (a shard or the proxy) by its topology
// over gRPC, the registry and the proxy by /readyz, Prometheus by
// /-/ready. Every target is checked at once, each within its own
// timeout, so one hung target costs its timeout, not everyone's.
// It links no runtime: it reads the proxy and the registry through their
// api packages (internal/architecture checks).
package health

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/shardctl/shardctl/internal/gatewaypb"
	"github.com/shardctl/shardctl/internal/human"
	"github.com/shardctl/shardctl/internal/registry/registryapi"
	"github.com/shardctl/shardctl/internal/registry/registryclient"
	"github.com/shardctl/shardctl/internal/shardconn"
	"github.com/shardctl/shardctl/probes/proxies"
)

// Kinds of target.
const (
	KindZeebe      = "zeebe"
	KindRegistry   = "registry"
	KindProxy      = "proxy"
	KindPrometheus = "prometheus"
)

// Kinds are the kinds a target may name, in the order help lists them.
var Kinds = []string{KindZeebe, KindRegistry, KindProxy, KindPrometheus}

// DefaultTimeout bounds one target's check.
const DefaultTimeout = 5 * time.Second

// Target is one thing to check.
type Target struct {
	// Name is how the report names it: a shard's id, or the argument.
	Name    string
	Kind    string
	Address string // HOST:PORT for zeebe, a base URL for the others
	// TLS and Credential are how a zeebe target is reached, as a shard's
	// registry metadata names them (see shardconn.Access.Target).
	TLS, Credential string
	// Held says why the proxies cannot use a shard ("" when they can):
	// they hold it DOWN, or it refuses their own calls' credential. Such
	// a shard is unhealthy whatever it answers us, for the work goes
	// through the proxies.
	Held string
}

// ParseTarget reads a command-line target: KIND=ADDRESS, or a bare
// HOST:PORT, which is a Zeebe gateway (a shard or the proxy's gateway
// port), the most common thing to check.
func ParseTarget(s string) (Target, error) {
	kind, addr, named := strings.Cut(s, "=")
	if !named {
		kind, addr = KindZeebe, s
	}
	if !slices.Contains(Kinds, kind) {
		return Target{}, fmt.Errorf("target %q: unknown kind %q; want %s=ADDRESS or a bare HOST:PORT (zeebe)", s, kind, strings.Join(Kinds, "|"))
	}
	// A gateway is named by its address, the others by their kind: the
	// ADDRESS column says the rest.
	t := Target{Name: kind, Kind: kind, Address: addr}
	if kind == KindZeebe {
		t.Name = addr
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return Target{}, fmt.Errorf("target %q: a Zeebe gateway is HOST:PORT: %v", s, err)
		}
		return t, nil
	}
	u, err := url.Parse(addr)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return Target{}, fmt.Errorf("target %q: want an http(s) URL, e.g. %s=http://127.0.0.1:9700", s, kind)
	}
	return t, nil
}

// Result is one target's health.
type Result struct {
	Name    string  `json:"name"`
	Kind    string  `json:"kind"`
	Address string  `json:"address"`
	Healthy bool    `json:"healthy"`
	Reason  string  `json:"reason"` // why not, or what was seen
	Seconds float64 `json:"seconds"`
	// Topology is what a Zeebe gateway said of its cluster.
	Topology *Topology `json:"topology,omitempty"`
}

// Topology sums up a Zeebe cluster's topology.
type Topology struct {
	Brokers           int         `json:"brokers"`
	ClusterSize       int32       `json:"clusterSize"`
	PartitionsCount   int32       `json:"partitionsCount"`
	ReplicationFactor int32       `json:"replicationFactor"`
	GatewayVersion    string      `json:"gatewayVersion,omitempty"`
	Partitions        []Partition `json:"partitions"`
	// Missing counts partitions the cluster has and no broker reports.
	Missing int `json:"missing,omitempty"`
}

// Partition is one partition: its leader's node id (-1: none) and its
// replicas' health. Through the proxy every shard has its own partitions
// 1…N: Cluster names the shard (the proxy writes it before a "/" in its
// brokers' hosts).
type Partition struct {
	Cluster  string   `json:"cluster,omitempty"`
	ID       int32    `json:"id"`
	Leader   int32    `json:"leader"`
	Replicas int      `json:"replicas"`
	Health   []string `json:"health"` // HEALTHY, UNHEALTHY or DEAD per replica, leader first
	// Inactive counts brokers that hold the partition outside its
	// replication group (8.8's INACTIVE role, as while the cluster
	// scales): neither a replica nor a problem, whatever their health.
	Inactive int `json:"inactive,omitempty"`
}

// Report is every target's result, in the order asked.
type Report struct {
	Results []Result `json:"results"`
}

// Healthy reports whether every target is.
func (r Report) Healthy() bool {
	for _, res := range r.Results {
		if !res.Healthy {
			return false
		}
	}
	return true
}

// Unhealthy names the targets that are not, with why.
func (r Report) Unhealthy() []string {
	var out []string
	for _, res := range r.Results {
		if !res.Healthy {
			out = append(out, res.Name+": "+res.Reason)
		}
	}
	return out
}

// Checker checks targets.
type Checker struct {
	// Timeout bounds each target (default DefaultTimeout).
	Timeout time.Duration
	// HTTP is the client of the HTTP checks; nil is one of its own.
	HTTP *http.Client
	// ProxyHTTP, when set, asks the proxies' admin /readyz (an https
	// admin's CA); HTTP the other HTTP targets.
	ProxyHTTP *http.Client
	// Shards is how zeebe targets are reached: the CA and the
	// credentials their TLS and Credential name (nil: the system's roots,
	// no credential).
	Shards *shardconn.Access
}

// Check checks every target at once and returns when all are done.
func (c *Checker) Check(ctx context.Context, targets []Target) Report {
	rep := Report{Results: make([]Result, len(targets))}
	var wg sync.WaitGroup
	for i, t := range targets {
		wg.Go(func() { rep.Results[i] = c.check(ctx, t) })
	}
	wg.Wait()
	return rep
}

func (c *Checker) check(ctx context.Context, t Target) Result {
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	res := Result{Name: t.Name, Kind: t.Kind, Address: t.Address}
	var err error
	switch t.Kind {
	case KindZeebe:
		res.Topology, err = c.topology(ctx, t)
		if err == nil {
			err = res.Topology.problem()
		}
		if res.Topology != nil && err == nil {
			res.Reason = res.Topology.summary()
		}
	case KindPrometheus:
		res.Reason, err = c.ready(ctx, c.HTTP, t.Address, "/-/ready")
	case KindProxy:
		res.Reason, err = c.ready(ctx, cmp.Or(c.ProxyHTTP, c.HTTP), t.Address, "/readyz")
	default:
		res.Reason, err = c.ready(ctx, c.HTTP, t.Address, "/readyz")
	}
	res.Seconds = time.Since(start).Seconds()
	if err != nil {
		res.Reason = err.Error()
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			res.Reason = fmt.Sprintf("no answer within %v", timeout)
		}
	}
	if t.Held != "" {
		res.Reason = t.Held + "; " + res.Reason
		return res
	}
	res.Healthy = err == nil
	return res
}

// topology asks a gateway for its cluster's topology, over the TLS and
// with the credential its target names.
func (c *Checker) topology(ctx context.Context, t Target) (*Topology, error) {
	st, err := c.Shards.Target(t.Name, t.Address, t.TLS, t.Credential)
	if err != nil {
		return nil, err
	}
	conn, err := st.Dial()
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	resp, err := pb.NewGatewayClient(conn).Topology(ctx, &pb.TopologyRequest{}, grpc.WaitForReady(false))
	if err != nil {
		if shardconn.Refused(err) {
			return nil, fmt.Errorf("%s (credential %s)", shardconn.Refusal(err), cmp.Or(st.Credential.Name(), "none: give this command one with --shard-* or --shard-credentials"))
		}
		return nil, gatewayError(err)
	}
	return summarize(resp), nil
}

// summarize reads a gateway's topology by partition.
func summarize(resp *pb.TopologyResponse) *Topology {
	t := &Topology{Brokers: len(resp.Brokers), ClusterSize: resp.ClusterSize, PartitionsCount: resp.PartitionsCount,
		ReplicationFactor: resp.ReplicationFactor, GatewayVersion: resp.GatewayVersion}
	type key struct {
		cluster string
		id      int32
	}
	parts := map[key]*Partition{}
	for _, b := range resp.Brokers {
		cluster, _, federated := strings.Cut(b.Host, "/")
		if !federated {
			cluster = ""
		}
		for _, p := range b.Partitions {
			k := key{cluster, p.PartitionId}
			part := parts[k]
			if part == nil {
				part = &Partition{Cluster: cluster, ID: p.PartitionId, Leader: -1}
				parts[k] = part
			}
			h := p.Health.String()
			switch p.Role {
			case pb.Partition_LEADER:
				part.Replicas++
				part.Leader = b.NodeId
				part.Health = append([]string{h}, part.Health...)
			case pb.Partition_INACTIVE:
				part.Inactive++
			default:
				part.Replicas++
				part.Health = append(part.Health, h)
			}
		}
	}
	// Partitions no broker reports are missing, not absent: a cluster
	// needs a leader for each of its partitions.
	if len(parts) < int(resp.PartitionsCount) {
		t.Missing = int(resp.PartitionsCount) - len(parts)
	}
	for _, p := range parts {
		t.Partitions = append(t.Partitions, *p)
	}
	slices.SortFunc(t.Partitions, func(a, b Partition) int {
		if c := strings.Compare(a.Cluster, b.Cluster); c != 0 {
			return c
		}
		return int(a.ID - b.ID)
	})
	return t
}

// gatewayError says what went wrong in words: grpc-go's transport text
// nests the dial error two quotes deep.
func gatewayError(err error) error {
	st := status.Convert(err)
	if st.Code() == codes.Unavailable {
		msg := st.Message()
		if _, dial, ok := strings.Cut(msg, "Error while dialing: "); ok {
			msg = strings.TrimSuffix(dial, `"`)
		}
		return fmt.Errorf("unreachable: %s", msg)
	}
	return fmt.Errorf("topology: %s: %s", st.Code(), st.Message())
}

// problem is what makes a topology unhealthy: no broker, a partition
// without a leader, a replica that is not HEALTHY.
func (t *Topology) problem() error {
	if t.Brokers == 0 {
		return errors.New("no broker in the topology")
	}
	var problems []string
	if t.Missing > 0 {
		problems = append(problems, fmt.Sprintf("%s of %d reported by no broker", human.Plural(float64(t.Missing), "partition"), t.PartitionsCount))
	}
	for _, p := range t.Partitions {
		name := fmt.Sprintf("partition %d", p.ID)
		if p.Cluster != "" {
			name = p.Cluster + " " + name
		}
		if p.Leader < 0 {
			problems = append(problems, name+" has no leader")
			continue
		}
		for i, h := range p.Health {
			if h != pb.Partition_HEALTHY.String() {
				role := "a follower"
				if i == 0 {
					role = "the leader"
				}
				problems = append(problems, fmt.Sprintf("%s: %s is %s", name, role, h))
			}
		}
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

func (t *Topology) summary() string {
	return fmt.Sprintf("%s, %s with a leader, replication %d", human.Plural(float64(t.Brokers), "broker"), human.Plural(float64(len(t.Partitions)), "partition"), t.ReplicationFactor)
}

// ready asks base+path and calls a 2xx answer ready. A registry's JSON
// answer carries its reason; other answers' first line is shown.
func (c *Checker) ready(ctx context.Context, hc *http.Client, base, path string) (string, error) {
	u, err := readyURL(base, path)
	if err != nil {
		return "", err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return "", err
	}
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return "", fmt.Errorf("unreachable: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	said := firstLine(body)
	if resp.StatusCode/100 != 2 {
		return "", fmt.Errorf("%s %s: %s", path, resp.Status, said)
	}
	return said, nil
}

// readyURL is the readiness endpoint beside a base URL: a registry's
// Eureka URL (…/eureka) and a bare host both lead to the host's root.
func readyURL(base, path string) (string, error) {
	u, err := url.Parse(base)
	if err != nil {
		return "", err
	}
	u.Path = strings.TrimSuffix(strings.TrimSuffix(u.Path, "/"), "/eureka") + path
	u.RawQuery = ""
	return u.String(), nil
}

// firstLine shows an answer in a table cell: a JSON object by its
// "reason" (the registry's readyz) or "ready", else the first line.
func firstLine(body []byte) string {
	var v struct {
		Ready  *bool  `json:"ready"`
		Reason string `json:"reason"`
	}
	if json.Unmarshal(body, &v) == nil && (v.Reason != "" || v.Ready != nil) {
		if v.Reason != "" {
			return v.Reason
		}
		return "ready"
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(body)), "\n")
	if r := []rune(line); len(r) > 120 {
		line = string(r[:119]) + "…"
	}
	return line
}

// FederationTargets are what a federation is made of, as the registry
// knows it: every shard of app (named by its id), the registry itself,
// every proxy registered there (its gateway and its admin), and the
// proxy admin and Prometheus named by URL ("" names none).
func FederationTargets(ctx context.Context, c *registryclient.Client, admin proxies.Admin, app, proxyAdmin, prometheus string) ([]Target, error) {
	shards, err := c.Shards(ctx, app)
	if err != nil {
		return nil, fmt.Errorf("list the shards: %w", err)
	}
	proxyInstances, err := c.Shards(ctx, registryapi.ProxiesApp)
	if err != nil {
		return nil, fmt.Errorf("list the proxies: %w", err)
	}
	// What the proxies see: a shard they hold DOWN is DOWN here too, and
	// one the registry dropped while they still route to it is checked.
	views, _ := admin.Read(ctx, c) // a proxy that cannot be asked hides nothing listed
	held := func(id string) string {
		switch h := proxies.Of(views, id); {
		case h.Down > 0:
			return h.DownLine()
		case h.AuthRefused > 0:
			return h.AuthLine()
		}
		return ""
	}
	var out []Target
	for _, s := range shards {
		out = append(out, Target{Name: s.ID, Kind: KindZeebe, Address: s.Address, Held: held(s.ID),
			TLS: s.Metadata[registryapi.MetaTLS], Credential: s.Metadata[registryapi.MetaCredential]})
	}
	for _, s := range proxies.Unlisted(views, shards) {
		why := held(s.ID)
		if why == "" {
			why = "routed to by the proxies"
		}
		out = append(out, Target{Name: s.ID, Kind: KindZeebe, Address: s.Address,
			Held: "not in the registry, " + why + ": its keys cannot be routed"})
	}
	out = append(out, Target{Name: KindRegistry, Kind: KindRegistry, Address: c.Base.String()})
	for _, p := range proxyInstances {
		out = append(out, Target{Name: p.ID, Kind: KindZeebe, Address: p.Address, TLS: p.Metadata[registryapi.MetaTLS]})
		if admin := p.Metadata[registryapi.MetaAdmin]; admin != "" {
			out = append(out, Target{Name: p.ID, Kind: KindProxy, Address: admin})
		}
	}
	named := func(kind, addr string) bool {
		return slices.ContainsFunc(out, func(t Target) bool { return t.Kind == kind && t.Address == addr })
	}
	if proxyAdmin != "" && !named(KindProxy, proxyAdmin) {
		out = append(out, Target{Name: KindProxy, Kind: KindProxy, Address: proxyAdmin})
	}
	if prometheus != "" {
		out = append(out, Target{Name: KindPrometheus, Kind: KindPrometheus, Address: prometheus})
	}
	return out, nil
}
