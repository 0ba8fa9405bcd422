package cmdutil

import (
	"context"
	"fmt"
	"sort"

	"github.com/spf13/pflag"

	"github.com/shardctl/shardctl/completions"
	"github.com/shardctl/shardctl/internal/backlog"
	"github.com/shardctl/shardctl/internal/registry/registryapi"
	"github.com/shardctl/shardctl/internal/registry/registryclient"
	"github.com/shardctl/shardctl/internal/source"
)

// RegistryFlags are the flags of every command that reads or writes the
// shards of a registry: --app and --token-file, over the globals.
type RegistryFlags struct {
	*Globals
	App       string
	TokenFile string
}

// AddFlags adds --app and --token-file.
func (f *RegistryFlags) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&f.App, "app", registryapi.DefaultShardsApp, "registry application of the shards")
	fs.StringVar(&f.TokenFile, "token-file", "", "file with the bearer token for registry writes (env "+EnvRegistryToken+")")
}

// Client opens the registry named by --registry / SHARDCTL_REGISTRY.
func (f *RegistryFlags) Client() (*registryclient.Client, error) {
	return f.Globals.RegistryClient("", f.TokenFile)
}

// Catalog offers shard ids and pools to shell completion.
func (f *RegistryFlags) Catalog() (completions.Catalog, error) {
	c, err := f.Client()
	if err != nil {
		return nil, err
	}
	return registryCatalog{c, f.App}, nil
}

type registryCatalog struct {
	c   *registryclient.Client
	app string
}

func (rc registryCatalog) ShardIDs(ctx context.Context) ([]completions.Item, error) {
	shards, err := rc.c.Shards(ctx, rc.app)
	var items []completions.Item
	for _, s := range shards {
		items = append(items, completions.Item{Value: s.ID, Description: fmt.Sprintf("%s, slot %d, %s", s.State, s.Slot, s.Pool)})
	}
	return items, err
}

func (rc registryCatalog) Pools(ctx context.Context) ([]completions.Item, error) {
	shards, err := rc.c.Shards(ctx, rc.app)
	seen := map[string]int{}
	for _, s := range shards {
		if s.Pool != "" {
			seen[s.Pool]++
		}
	}
	var items []completions.Item
	for p, n := range seen {
		items = append(items, completions.Item{Value: p, Description: fmt.Sprintf("%d shards", n)})
	}
	sort.Slice(items, func(i, j int) bool { return items[i].Value < items[j].Value })
	return items, err
}

// BacklogReader reads shards' backlogs from --prometheus, or --scrape
// SHARD=URL, or each shard's registered metrics URL.
func BacklogReader(g *Globals) (backlog.Reader, error) {
	prom := g.PrometheusURL()
	if prom != "" && len(g.Scrape) > 0 {
		return nil, Usagef("--prometheus and --scrape both given: pick one source")
	}
	if prom != "" {
		return backlog.NewPrometheus(prom)
	}
	urls := map[string]string{}
	for _, v := range g.Scrape {
		tg, err := source.ParseTarget(v)
		if err != nil {
			return nil, UsageError(err)
		}
		urls[tg.Name] = tg.URL
	}
	return backlog.Scrape{URLs: urls}, nil
}
