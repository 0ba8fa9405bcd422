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

// Read lists the proxies registered in registry.ProxiesApp and asks each
// for GET /shards, at once, each within Timeout; views are by proxy id.
func Read(ctx context.Context, r Registry) ([]View, error) {
	instances, err := r.Shards(ctx, registryapi.ProxiesApp)
	if err != nil {
		return nil, fmt.Errorf("list the proxies: %w", err)
	}
	views := make([]View, len(instances))
	var wg sync.WaitGroup
	for i, in := range instances {
		views[i] = View{Proxy: in.ID, Admin: in.Metadata[registryapi.MetaAdmin]}
		wg.Go(func() { views[i].Shards, views[i].Error = ask(ctx, views[i].Admin) })
	}
	wg.Wait()
	slices.SortFunc(views, func(a, b View) int { return strings.Compare(a.Proxy, b.Proxy) })
	return views, nil
}

func ask(ctx context.Context, admin string) ([]proxyapi.ShardStatus, string) {
	if admin == "" {
		return nil, "registered without an admin address"
	}
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(admin, "/")+"/shards", nil)
	if err != nil {
		return nil, err.Error()
	}
	resp, err := http.DefaultClient.Do(req)
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
	// Refusing counts the proxies that give it no new instances for its
	// backlog; Backlog is one of their readings (the first by proxy id).
	Refusing int
	Backlog  *proxyapi.BacklogStatus
}

// Of sums the views for one shard.
func Of(views []View, shard string) Health {
	h := Health{}
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
			if b := s.Backlog; b != nil && !b.Admitting {
				h.Refusing++
				if h.Backlog == nil {
					h.Backlog = b
				}
			}
		}
	}
	return h
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

// Reason is one proxy's reason for DOWN, named ("" when none holds it
// DOWN): the first proxy by id, so that it reads the same every time.
func (h Health) Reason() string {
	if len(h.Reasons) == 0 {
		return ""
	}
	first := slices.Sorted(maps.Keys(h.Reasons))[0]
	return first + ": " + h.Reasons[first]
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
