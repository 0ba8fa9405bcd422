package route

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/grpc/metadata"

	pb "github.com/shardctl/shardctl/internal/gatewaypb"
	"github.com/shardctl/shardctl/internal/ledger"
	"github.com/shardctl/shardctl/internal/physicaltenant"
	"github.com/shardctl/shardctl/internal/proxy/proxyapi"
)

// Replays of the deployment ledger to a shard that joined, came back
// from DOWN, or missed a deployment. Each runs in a goroutine of its
// own, one at a time per shard, every call with a deadline, under no
// lock, and outside the health round and the registry's follow loop: a
// shard that accepts a call and never answers delays only itself.
//
// Every shard still sees the deployments in the ledger's order, which
// Zeebe's versions depend on, without a lock between replays and
// clients' deployments: a shard that needs a replay is no target of a
// client's deployment (it takes that one from the ledger, in order), a
// replay reads the ledger again until it has deployed all there is, and
// a deployment recorded while a replay ran marks the shard again
// (NeedsReplay), which its replay notices (the health generation) and
// answers with another round.

// Deadlines of deployments.
const (
	// ReplayTimeout bounds one replay of the whole ledger to a shard.
	ReplayTimeout = time.Minute
	// DefaultDeployTimeout bounds a client's deployment on each shard
	// (Config.DeployTimeout; the client's own deadline too, when it is
	// sooner).
	DefaultDeployTimeout = 30 * time.Second
)

// errDownAgain: the shard was marked DOWN while its replay ran.
var errDownAgain = errors.New("marked down again during its ledger replay: replayed again once its health checks pass")

// NeedsReplay marks s as missing a deployment: it takes no new instances
// and no client deployment until the ledger is replayed to it, which
// starts now unless s is DOWN (then its health checks start it when it
// is back).
func (p *Core) NeedsReplay(s *Shard) {
	s.health.mark()
	if !s.health.down.Load() {
		p.startReplay(s, false)
	}
}

// startReplay replays the ledger to s in a goroutine of its own, unless
// one runs already (it notices what marked s since it began). The
// channel, nil when one ran already, hears how its first round ended; a
// round that failed is tried again after replayRetry, doubling, while s
// is in the shard set and not DOWN (the health checks start the replay of
// a DOWN shard once it is back), unless once is set (the caller takes
// the failure).
func (p *Core) startReplay(s *Shard, once bool) <-chan error {
	if !s.replaying.CompareAndSwap(false, true) {
		return nil
	}
	done := make(chan error, 1)
	p.owned.Go(func() {
		defer s.replaying.Store(false)
		wait := replayRetry
		for first := true; ; first = false {
			err := p.replayRound(s)
			if first {
				done <- err
			}
			if err == nil || once || errors.Is(err, errDownAgain) {
				return
			}
			select {
			case <-p.stopping.Done():
				return
			case <-time.After(wait):
			}
			if s.health.down.Load() || p.ShardByID(s.ID) != s || !s.health.needsReplay.Load() {
				return
			}
			wait = min(2*wait, 30*time.Second)
		}
	})
	return done
}

// replayRetry is how soon a replay that failed is tried again.
const replayRetry = time.Second

// replayRound replays the ledger to s until a round finds nothing that
// marked s since it began.
func (p *Core) replayRound(s *Shard) error {
	for {
		gen := s.health.generation()
		ctx, cancel := context.WithTimeout(p.stopping, ReplayTimeout)
		err := p.replay(ctx, s)
		cancel()
		if err != nil {
			s.NoteError(err)
			return err
		}
		if p.replayed(s, gen) {
			return nil
		}
		if s.health.down.Load() {
			p.logShard(slog.LevelInfo, s, "shard stays down", "reason", errDownAgain.Error())
			return errDownAgain
		}
		// A deployment recorded meanwhile: once more.
	}
}

// replay deploys every ledger entry to s, in order, records the keys it
// issued, and reads the ledger again until no entry is left to deploy.
func (p *Core) replay(ctx context.Context, s *Shard) error {
	start := time.Now()
	deployed := map[int]bool{}
	for {
		deployments, err := p.cfg.Ledger.All(ctx)
		if err != nil {
			err = fmt.Errorf("read the deployment ledger: %w", err)
			p.logShardRepeating(slog.LevelWarn, s, "ledger replay failed", "err", err)
			return err
		}
		var todo []ledger.Deployment
		for _, d := range deployments {
			if !deployed[d.Seq] {
				todo = append(todo, d)
			}
		}
		if len(todo) == 0 {
			if len(deployed) > 0 {
				p.logShardRepeating(slog.LevelInfo, s, "ledger replay finished", "deployments", len(deployed), "took", logDuration(time.Since(start)))
			}
			return nil
		}
		if len(deployed) == 0 {
			// A shard the health checks keep trying may start a replay
			// every interval: these lines may repeat.
			p.logShardRepeating(slog.LevelInfo, s, "ledger replay started", "deployments", len(todo))
		}
		for _, d := range todo {
			if err := p.replayOne(ctx, s, d); err != nil {
				p.logShardRepeating(slog.LevelWarn, s, "ledger replay failed", "deployments", len(deployments), "err", err)
				return err
			}
			deployed[d.Seq] = true
		}
	}
}

// replayOne deploys one ledger entry to s, unless its tenant is not
// there (Sync re-adds a shard whose tenants change).
func (p *Core) replayOne(ctx context.Context, s *Shard, d ledger.Deployment) error {
	if !s.Serves(d.PhysicalTenant) {
		return nil
	}
	req := &pb.DeployResourceRequest{}
	for _, r := range d.Resources {
		req.Resources = append(req.Resources, &pb.Resource{Name: r.Name, Content: r.Content})
	}
	// Without a token to give it asks without one, as the health checks
	// do: a shard that wants none takes it.
	dctx, _ := s.Conn.Own(ctx)
	if d.PhysicalTenant != "" {
		dctx = metadata.AppendToOutgoingContext(dctx, physicaltenant.Header, d.PhysicalTenant)
	}
	resp, err := s.Conn.Client().DeployResource(dctx, req)
	if err != nil {
		return fmt.Errorf("shard %s: replay deployment %d of the ledger: %w", s.ID, d.Seq, err)
	}
	keys := map[string]int64{}
	for _, dep := range resp.GetDeployments() {
		if pm := dep.GetProcess(); pm != nil {
			keys[ledger.ProcessRef(pm.GetBpmnProcessId(), pm.GetVersion())] = pm.GetProcessDefinitionKey()
		}
	}
	if err := p.cfg.Ledger.SetKeys(ctx, d.Seq, s.ID, keys); err != nil {
		return err
	}
	mine := ledger.Deployment{Seq: d.Seq, MessageStarts: d.MessageStarts, PhysicalTenant: d.PhysicalTenant}
	for _, pr := range d.Processes {
		if k, ok := keys[ledger.ProcessRef(pr.BpmnProcessID, pr.Version)]; ok {
			mine.Processes = append(mine.Processes, ledger.ProcessID{BpmnProcessID: pr.BpmnProcessID, Version: pr.Version, Keys: map[string]int64{s.ID: k}})
		}
	}
	p.index.Add(mine)
	return nil
}

// replayed records a replay that began at health generation gen: unless
// s was marked since (DOWN, or missing a newer deployment: that is newer
// than the replay's success, and wins), it needs no replay, and a DOWN
// shard is back. It reports whether it was.
func (p *Core) replayed(s *Shard, gen uint64) bool {
	h := &s.health
	h.mu.Lock()
	if h.gen != gen {
		h.mu.Unlock()
		return false
	}
	h.needsReplay.Store(false)
	if !h.down.Load() {
		h.mu.Unlock()
		return true
	}
	now := time.Now()
	downFor := now.Sub(h.since)
	h.since, h.reason = now, ""
	h.down.Store(false)
	h.consecutive.Store(0)
	h.mu.Unlock()
	p.metrics.up.WithLabelValues(s.ID).Set(1)
	p.logShard(slog.LevelInfo, s, "shard up", "from", proxyapi.Down, "to", s.State(),
		"reason", fmt.Sprintf("%d health checks passed and the ledger is replayed to it", p.cfg.Health.HealthyAfter), "downFor", logDuration(downFor))
	return true
}
