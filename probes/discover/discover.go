// Package discover finds the shards to read in a registry: the shards it
// lists, and those a proxy still routes to after the registry dropped
// them. (It cannot live in source: the proxy runtime reads shards through
// source, and proxies' views are the proxy's types.)
// It links no runtime: it reads the proxy and the registry through their
// api packages (internal/architecture checks).
package discover

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/shardctl/shardctl/internal/registry/registryapi"
	"github.com/shardctl/shardctl/internal/registry/registryclient"
	"github.com/shardctl/shardctl/internal/source"
	"github.com/shardctl/shardctl/probes/proxies"
)

// RegistryTargets finds the shards to scrape in a registry (for
// source.Scrape's Discover): each shard of App with a metrics URL in its
// registration, named by its id; and each shard a proxy still routes to that the
// registry no longer lists (evicted, its keys still outstanding), at the
// URL it was last found at, so that it shows as a shard without metrics
// instead of vanishing.
type RegistryTargets struct {
	Registry *registryclient.Client
	App      string
	// Admin is how the proxies are asked which shards they route to.
	Admin proxies.Admin

	known map[string]string // id → metrics URL, every one found so far
}

// Find lists the targets now.
func (d *RegistryTargets) Find(ctx context.Context) ([]source.Target, error) {
	shards, err := d.Registry.Shards(ctx, d.App)
	if err != nil {
		return nil, fmt.Errorf("list the shards of %s: %w", d.App, err)
	}
	if d.known == nil {
		d.known = map[string]string{}
	}
	want := map[string]string{}
	for _, s := range shards {
		if u := s.Metadata[registryapi.MetaMetrics]; u != "" {
			want[s.ID], d.known[s.ID] = u, u
		}
	}
	// A proxy that cannot be asked hides nothing the registry lists.
	views, _ := d.Admin.Read(ctx, d.Registry)
	for _, s := range proxies.Unlisted(views, shards) {
		if u, ok := d.known[s.ID]; ok {
			want[s.ID] = u
		}
	}
	var out []source.Target
	for _, id := range slices.Sorted(maps.Keys(want)) {
		out = append(out, source.Target{Name: id, URL: want[id]})
	}
	return out, nil
}
