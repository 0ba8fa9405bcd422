// Package proxies asks every proxy registered in a registry what it sees
// of the shards: the registry knows the state an operator set, only the
// proxies know which shards answer.
// It links no runtime: it reads the proxy and the registry through their
// api packages (internal/architecture checks).
package proxies

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/shardctl/shardctl/internal/human"
	"github.com/shardctl/shardctl/internal/proxy/proxyapi"
	"github.com/shardctl/shardctl/internal/registry/registryapi"
)

// Timeout bounds the question to one proxy: a proxy that does not answer
// is reported, not waited for.
const Timeout = 2 * time.Second

// View is what one proxy sees.
type View struct {
	Proxy  string                 `json:"proxy"`
	Admin  string                 `json:"admin"`
	Shards []proxyapi.ShardStatus `json:"shards,omitempty"`
	Error  string                 `json:"error,omitempty"`
}

// Registry is what Read needs of a registry client.
type Registry interface {
	Shards(ctx context.Context, app string) ([]registryapi.Shard, error)
}

// Admin is how the proxies' admin endpoints are asked: HTTP's client
// (an https admin's CA) and the bearer token their GET /shards may want
// (proxy serve --admin-token-file). The zero Admin asks in the clear,
// without a token.
type Admin struct {
	HTTP  *http.Client
	Token string
}

// Read is Admin{}.Read.
func Read(ctx context.Context, r Registry) ([]View, error) { return Admin{}.Read(ctx, r) }

// Read lists the proxies registered in registry.ProxiesApp and asks each
// for GET /shards, at once, each within Timeout; views are by proxy id.
func (a Admin) Read(ctx context.Context, r Registry) ([]View, error) {
	instances, err := r.Shards(ctx, registryapi.ProxiesApp)
	if err != nil {
		return nil, fmt.Errorf("list the proxies: %w", err)
	}
	views := make([]View, len(instances))
	var wg sync.WaitGroup
	for i, in := range instances {
		views[i] = View{Proxy: in.ID, Admin: in.Metadata[registryapi.MetaAdmin]}
		wg.Go(func() { views[i].Shards, views[i].Error = a.ask(ctx, views[i].Admin) })
	}
	wg.Wait()
	slices.SortFunc(views, func(a, b View) int { return strings.Compare(a.Proxy, b.Proxy) })
	return views, nil
}

func (a Admin) ask(ctx context.Context, admin string) ([]proxyapi.ShardStatus, string) {
	if admin == "" {
		return nil, "registered without an admin address"
	}
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(admin, "/")+"/shards", nil)
	if err != nil {
		return nil, err.Error()
	}
	if a.Token != "" {
		req.Header.Set("Authorization", "Bearer "+a.Token)
	}
	hc := a.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, "unreachable: " + err.Error()
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, "GET /shards: " + resp.Status
	}
	var doc struct {
		Shards []proxyapi.ShardStatus `json:"shards"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		return nil, "GET /shards: " + err.Error()
	}
	return doc.Shards, ""
}

// Health is what the proxies say of one shard.
type Health struct {
	Proxies int // that answered and route to the shard
	Down    int // of those, holding it DOWN
	// Reasons of the proxies that hold it DOWN, by proxy.
	Reasons map[string]string
	// Refusing counts the proxies that give it no new instances: their
	// admission is refusing (its backlog, or its instance limit), or, from
	// a proxy older than pacing that says no state, it is not admitting.
	// Backlog is one of their readings (the first by proxy id).
	Refusing int
	Backlog  *proxyapi.BacklogStatus
	// Paced counts the proxies that pace it (new instances up to a rate),
	// and PacedRate is the new instances a second they give it between
	// them: the sum of their AdmitRate, 0 when one of them has no rate
	// yet (it cannot tell what it keeps the queue at).
	Paced     int
	PacedRate float64
	// AuthRefused counts the proxies whose own calls it refuses for their
	// credential; AuthReasons are what it said to each, by proxy.
	AuthRefused int
	AuthReasons map[string]string
	// Admission is the reading to show: the most restrictive among the
	// proxies' (refusing over pacing), the first by proxy id; nil while
	// every proxy admits the shard.
	Admission *proxyapi.BacklogStatus
}

// refuses says whether a proxy's reading gives the shard no new
// instances: its state says so, or, from a proxy that predates the
// state, its Admitting is false.
func refuses(b *proxyapi.BacklogStatus) bool {
	return b.State == proxyapi.AdmissionRefused || !b.Admitting
}

// Of sums the views for one shard.
func Of(views []View, shard string) Health {
	h := Health{}
	var firstPaced *proxyapi.BacklogStatus
	pacedUnbounded := false
	for _, v := range views { // sorted by proxy id
		for _, s := range v.Shards {
			if s.ID != shard {
				continue
			}
			h.Proxies++
			if !s.Health.Up {
				h.Down++
				if h.Reasons == nil {
					h.Reasons = map[string]string{}
				}
				h.Reasons[v.Proxy] = s.Health.Reason
			}
			if s.Health.Auth != "" {
				h.AuthRefused++
				if h.AuthReasons == nil {
					h.AuthReasons = map[string]string{}
				}
				h.AuthReasons[v.Proxy] = s.Health.Auth
			}
			b := s.Backlog
			switch {
			case b == nil:
			case refuses(b):
				h.Refusing++
				if h.Backlog == nil {
					h.Backlog = b
				}
			case b.State == proxyapi.AdmissionPaced:
				h.Paced++
				h.PacedRate += b.AdmitRate
				pacedUnbounded = pacedUnbounded || b.AdmitRate <= 0
				if firstPaced == nil {
					firstPaced = b
				}
			}
		}
	}
	if pacedUnbounded {
		h.PacedRate = 0
	}
	h.Admission = h.Backlog
	if h.Admission == nil {
		h.Admission = firstPaced
	}
	return h
}

// AdmissionState is the shard's admission as the proxies give it, the
// most restrictive first: proxyapi.AdmissionRefused when one refuses it,
// proxyapi.AdmissionPaced when one paces it, else
// proxyapi.AdmissionOpen.
func (h Health) AdmissionState() string {
	switch {
	case h.Refusing > 0:
		return proxyapi.AdmissionRefused
	case h.Paced > 0:
		return proxyapi.AdmissionPaced
	}
	return proxyapi.AdmissionOpen
}

// AdmissionReason says why, as the reading shown (Admission) says it: its
// reason, or, from a proxy that gives none (older than pacing, or paced
// before it knew a rate), what its numbers say. "" while every proxy
// admits the shard.
func (h Health) AdmissionReason() string {
	b := h.Admission
	switch {
	case b == nil:
		return ""
	case b.Reason != "":
		return b.Reason
	case refuses(b):
		why := fmt.Sprintf("backlog %s records (max %s)", human.Count(b.Records), human.Count(b.Max))
		if b.Growing {
			why += fmt.Sprintf(", growing %+.0f/s", b.Slope)
		}
		return why
	case b.QueueDelay < 0:
		return fmt.Sprintf("records not processed at all over the %s target", human.Latency(b.QueueTarget))
	}
	return fmt.Sprintf("queue %s over the %s target", human.Latency(b.QueueDelay), human.Latency(b.QueueTarget))
}

// Unlisted are the shards the proxies route to that are not among
// registered: the registry dropped them while their keys still route
// there. Each is as the first proxy (by id) that knows it reports it.
func Unlisted(views []View, registered []registryapi.Shard) []proxyapi.ShardStatus {
	seen := map[string]bool{}
	for _, s := range registered {
		seen[s.ID] = true
	}
	var out []proxyapi.ShardStatus
	for _, v := range views { // sorted by proxy id
		for _, s := range v.Shards {
			if !seen[s.ID] {
				seen[s.ID] = true
				out = append(out, s)
			}
		}
	}
	slices.SortFunc(out, func(a, b proxyapi.ShardStatus) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// DownLine says how many proxies hold the shard DOWN and the first's
// reason: "DOWN in 1 of 2 proxies (proxy-a: 2 health checks failed)".
func (h Health) DownLine() string {
	return fmt.Sprintf("DOWN in %d of %d proxies (%s)", h.Down, h.Proxies, h.Reason())
}

// AuthLine says how many proxies the shard refuses and why it refused
// the first: "refuses the credential of 2 of 2 proxies (proxy-a:
// UNAUTHENTICATED: …)".
func (h Health) AuthLine() string {
	return fmt.Sprintf("refuses the credential of %d of %d proxies (%s): they cannot replay deployments to it or hand jobs back", h.AuthRefused, h.Proxies, firstNamed(h.AuthReasons))
}

// Reason is one proxy's reason for DOWN, named ("" when none holds it
// DOWN): the first proxy by id, so that it reads the same every time.
func (h Health) Reason() string { return firstNamed(h.Reasons) }

// firstNamed is the first proxy's entry by id, "proxy: entry" ("" for
// none).
func firstNamed(byProxy map[string]string) string {
	if len(byProxy) == 0 {
		return ""
	}
	first := slices.Sorted(maps.Keys(byProxy))[0]
	return first + ": " + byProxy[first]
}

// String reads as a table cell: "-" when no proxy routes to the shard,
// else "UP 2/2" or "DOWN 1/2".
func (h Health) String() string {
	switch {
	case h.Proxies == 0:
		return "-"
	case h.Down == 0:
		return fmt.Sprintf("UP %d/%d", h.Proxies, h.Proxies)
	}
	return fmt.Sprintf("DOWN %d/%d", h.Down, h.Proxies)
}
