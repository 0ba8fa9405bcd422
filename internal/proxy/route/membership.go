package route

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/shardctl/shardctl/internal/physicaltenant"
	"github.com/shardctl/shardctl/internal/proxy/proxyapi"
	"github.com/shardctl/shardctl/internal/registry/registryapi"
	"github.com/shardctl/shardctl/internal/registry/registryclient"
)

// Membership from a registry: the proxy is told the shard set it should
// have (Want) and makes it so in the background, retrying what failed
// (a shard that cannot be reached yet, a slot still held by a shard that
// is leaving) until it succeeds or the set changes again.

// syncRetry is how often a shard set that could not be applied is tried
// again.
const syncRetry = 2 * time.Second

// Want sets the shard set the proxy should have. The latest call wins.
func (p *Core) Want(shards []proxyapi.ShardConfig) {
	p.follow.mu.Lock()
	p.follow.want, p.follow.have = append([]proxyapi.ShardConfig(nil), shards...), true
	p.follow.mu.Unlock()
	select {
	case p.follow.wake <- struct{}{}:
	default:
	}
}

// membership holds the latest wanted shard set for the follow loop.
type membership struct {
	mu   sync.Mutex
	want []proxyapi.ShardConfig
	have bool
	wake chan struct{}
	// onSync, when set, is told how each sync went (for logs and tests).
	onSync func(error)
}

func (p *Core) followLoop(ctx context.Context) {
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	for {
		select {
		case <-p.stopping.Done():
			return
		case <-p.follow.wake:
		case <-retry.C:
		}
		p.follow.mu.Lock()
		want, have := p.follow.want, p.follow.have
		p.follow.mu.Unlock()
		if !have {
			continue
		}
		err := p.Sync(ctx, want)
		if err != nil {
			p.logRepeating(slog.LevelWarn, "registry sync failed, retrying", "err", err, "retryIn", logDuration(syncRetry))
		}
		if p.follow.onSync != nil {
			p.follow.onSync(err)
		}
		if err != nil {
			retry.Reset(syncRetry)
		}
	}
}

// Sync makes the proxy's shards the ones in want: a new shard is
// connected and replayed the ledger before it takes instances; states
// follow; a shard whose address or slot changed is replaced; a shard that
// left the set stays, as DOWN, so its keys still route to it and fail
// with a clear error instead of NOT_FOUND, until its slot goes to another.
func (p *Core) Sync(ctx context.Context, want []proxyapi.ShardConfig) error {
	sorted := append([]proxyapi.ShardConfig(nil), want...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Slot < sorted[j].Slot })
	// States first: they are instant, and a drain must not wait behind a
	// new shard that takes seconds to connect and replay.
	var joining []proxyapi.ShardConfig
	seen := map[string]bool{}
	for _, sc := range sorted {
		if sc.State == "" {
			sc.State = proxyapi.Up
		}
		seen[sc.ID] = true
		cur := p.ShardByID(sc.ID)
		if cur != nil && (cur.Addr != sc.Addr || cur.Slot != sc.Slot || cur.Metrics != sc.Metrics || cur.REST != sc.REST || cur.TLS != sc.TLS || cur.Credential != sc.Credential ||
			!slices.Equal(cur.PhysicalTenants, sc.PhysicalTenants)) {
			// Re-added, a shard with other physical tenants is replayed
			// the deployments of those it serves now, and one with
			// another TLS setting or credential is dialled again with it.
			p.removeShard(cur, fmt.Sprintf("the registry moved it to address %s, slot %d, metrics %q, REST API %q, tls %q, credential %q, physical tenants %s",
				sc.Addr, sc.Slot, sc.Metrics, sc.REST, sc.TLS, sc.Credential, physicaltenant.Describe(sc.PhysicalTenants)))
			cur = nil
		}
		if cur == nil {
			joining = append(joining, sc)
			continue
		}
		switch {
		case cur.State() == sc.State:
		case sc.State == proxyapi.Up && cur.health.needsReplay.Load():
			// It missed a deployment while it was not UP: it is UP at
			// once, and takes instances once its replay caught it up.
			p.setState(cur, sc.State, "shard state changed", "the registry's; it takes new instances once the ledger is replayed to it")
			p.NeedsReplay(cur)
		default:
			p.setState(cur, sc.State, "shard state changed", "the registry's")
		}
		if from := cur.swapPool(sc.Pool); from != sc.Pool {
			p.logShard(slog.LevelInfo, cur, "shard pool changed", "from", from, "to", sc.Pool)
		}
	}
	for _, s := range p.Snapshot() {
		if !seen[s.ID] && s.State() != proxyapi.Down {
			p.setState(s, proxyapi.Down, "shard left the registry", "not in the registry any more: its keys fail until it is back")
			s.NoteError(errors.New("not in the registry any more"))
		}
	}
	var errs []error
	for _, sc := range joining {
		// The registry gives a slot to a new shard only once the shard
		// that had it left with its slot released: so does the proxy.
		if old := p.set.Load().bySlot[sc.Slot]; old != nil && !seen[old.ID] {
			p.removeShard(old, fmt.Sprintf("its slot went to shard %s", sc.ID))
		}
		if err := p.AddShard(ctx, sc, false); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("apply the registry's shards: %w", errors.Join(errs...))
	}
	return nil
}

// removeShard takes a shard out of routing at once and closes its
// connections once the calls in flight on it finished, or RemoveGrace
// passed, as grpc-go's graceful close does: a create the shard is
// answering is answered, and new calls go elsewhere.
func (p *Core) removeShard(s *Shard, reason string) {
	p.members.Lock()
	p.set.Store(p.set.Load().without(s, p.cfg.LegacyShard))
	p.members.Unlock()
	p.logShard(slog.LevelInfo, s, "shard removed", "address", s.Addr, "reason", reason, "inFlight", s.inflight.Load())
	p.owned.Go(func() {
		defer s.Conn.Close()
		grace := time.NewTimer(RemoveGrace)
		defer grace.Stop()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for s.inflight.Load() > 0 {
			select {
			case <-tick.C:
			case <-grace.C:
				p.logShard(slog.LevelWarn, s, "removed shard's calls cut", "inFlight", s.inflight.Load(), "grace", logDuration(RemoveGrace))
				return
			case <-p.bg.Done():
				return // Close ran out of time
			}
		}
	})
}

// RemoveGrace is how long the calls in flight on a shard that left may
// take to finish before its connections close.
const RemoveGrace = 30 * time.Second

// RefreshLedger reads the ledger again, so that deployments another proxy
// replica made are known here (definition keys, message start names).
func (p *Core) RefreshLedger(ctx context.Context) error {
	deployments, err := p.cfg.Ledger.All(ctx)
	if err != nil {
		return fmt.Errorf("read the deployment ledger: %w", err)
	}
	for _, d := range deployments {
		p.index.Add(d)
	}
	return nil
}

// followRegistry keeps the proxy's shards, their states, its ledger and
// the pool weights those of the registry until ctx ends: every change the
// watch pushes becomes a Want, every ledger change a RefreshLedger.
func (p *Core) followRegistry(ctx context.Context) {
	p.log.Info("following the registry", "registry", p.cfg.Registry.Base.String(), "app", p.cfg.App)
	// The watch calls back from one goroutine: only it changes
	// registryLost.
	heard := func() {
		if p.registryLost.Swap(nil) != nil {
			p.logRepeating(slog.LevelInfo, "registry watch reconnected", "registry", p.cfg.Registry.Base.String())
		}
	}
	p.cfg.Registry.Watch(ctx, p.cfg.App, registryclient.Watcher{
		Shards: func(_ uint64, shards []registryapi.Shard) { heard(); p.Want(fromRegistry(shards)) },
		Ledger: func(int) {
			heard()
			if err := p.RefreshLedger(ctx); err != nil {
				p.logRepeating(slog.LevelWarn, "ledger refresh failed", "err", err)
			}
		},
		Cutovers:  func(cs []registryapi.Cutover) { heard(); p.SetWeights(WeightsOf(cs)) },
		Connected: heard,
		Error: func(err error) {
			if p.registryLost.Load() == nil {
				now := time.Now()
				p.registryLost.Store(&now)
			}
			p.logRepeating(slog.LevelWarn, "registry watch broken, reconnecting", "registry", p.cfg.Registry.Base.String(), "err", err)
		},
	})
}

// RegistryLost is when the proxy last lost the registry's watch, while
// it has not heard it again; false while it hears it or follows none.
// Meanwhile it routes on the last shard set the registry sent.
func (p *Core) RegistryLost() (time.Time, bool) {
	if t := p.registryLost.Load(); t != nil {
		return *t, true
	}
	return time.Time{}, false
}

// announce registers the proxy in registry.ProxiesApp with its admin
// address, and keeps it registered until ctx ends (then deregisters it).
func (p *Core) announce(ctx context.Context) error {
	if p.adminAddr == nil {
		return nil
	}
	id := p.cfg.ID
	if id == "" {
		host, _ := os.Hostname()
		_, port, _ := net.SplitHostPort(p.addr.String())
		id = host + "-" + port
	}
	gatewayTLS := ""
	if p.cfg.TLS != nil {
		gatewayTLS = "true" // probes reach its gateway as a shard's
	}
	in, err := registryapi.NewShardInstance(registryapi.ShardRegistration{App: registryapi.ProxiesApp, ID: id, Address: p.addr.String(), TLS: gatewayTLS,
		Admin: p.AdminURL(), Metrics: p.AdminURL() + "/metrics",
		RenewalInterval: 10 * time.Second, LeaseDuration: 30 * time.Second})
	if err != nil {
		return fmt.Errorf("register the proxy: %w", err)
	}
	p.owned.Go(func() {
		p.cfg.Registry.Heartbeat(ctx, in, func(err error) {
			if err != nil {
				p.logRepeating(slog.LevelWarn, "proxy registration failed, retrying", "proxy", id, "app", registryapi.ProxiesApp, "err", err)
				return
			}
			p.log.Info("proxy registered", "proxy", id, "app", registryapi.ProxiesApp, "admin", p.AdminURL())
		})
	})
	return nil
}

// WeightsOf are the pool weights the proxy places by: those of the
// cutover written last (in progress, done or rolled back: its weights
// hold until another cutover), none when there was never one.
func WeightsOf(cs []registryapi.Cutover) map[string]int {
	var latest *registryapi.Cutover
	for i := range cs {
		if latest == nil || cs[i].UpdatedAt.After(latest.UpdatedAt) {
			latest = &cs[i]
		}
	}
	if latest == nil || len(latest.Weights) == 0 {
		return nil
	}
	return latest.Weights
}

// fromRegistry reads the registry's shards as the proxy's; a state the
// proxy does not route by (STARTING) takes nothing, as DOWN.
func fromRegistry(shards []registryapi.Shard) []proxyapi.ShardConfig {
	out := make([]proxyapi.ShardConfig, 0, len(shards))
	for _, s := range shards {
		st, err := proxyapi.ParseState(s.State)
		if err != nil {
			st = proxyapi.Down
		}
		out = append(out, proxyapi.ShardConfig{ID: s.ID, Addr: s.Address, Slot: s.Slot, State: st, Pool: s.Pool, Metrics: s.Metadata[registryapi.MetaMetrics], REST: s.Metadata[registryapi.MetaREST], TLS: s.Metadata[registryapi.MetaTLS],
			Credential:      s.Metadata[registryapi.MetaCredential],
			PhysicalTenants: registryapi.PhysicalTenants(s.Metadata)})
	}
	return out
}
