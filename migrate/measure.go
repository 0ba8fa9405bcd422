package migrate

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/api"
	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	"github.com/shardctl/shardctl/internal/registry/registryapi"
	"github.com/shardctl/shardctl/internal/signals"
	"github.com/shardctl/shardctl/internal/source"
)

// Sources say where a cutover reads its signals and gates: a Prometheus
// server, or each shard's /metrics (Scrape names a URL per shard id; a
// shard not named is read at the metrics URL of its registration).
type Sources struct {
	Prometheus string
	Scrape     map[string]string
}

// measurer answers gates and the preflight's signals. With scraping, it
// samples the shards in the background (stop it with close).
type measurer struct {
	prom    v1.API // nil without Prometheus
	signals source.Source
	scrape  *source.Scrape
	stop    context.CancelFunc
	wg      sync.WaitGroup
}

// errNoPrometheus is a PromQL gate without a server to ask.
var errNoPrometheus = errors.New("a query gate needs --prometheus (with --scrape, use signal gates)")

// CheckSources says whether the sources can answer every gate: a query
// gate needs a Prometheus server. plan and apply ask the same question,
// so that a plan apply would refuse is refused when it is made.
func CheckSources(gates []Gate, src Sources) error {
	for _, g := range gates {
		if g.Query != "" && src.Prometheus == "" {
			return fmt.Errorf("%w: gate %s: %v", ErrBadInput, g.Name, errNoPrometheus)
		}
	}
	return nil
}

func newMeasurer(src Sources, shards []registryapi.Shard, window time.Duration) (*measurer, error) {
	m := &measurer{stop: func() {}}
	if src.Prometheus != "" {
		c, err := api.NewClient(api.Config{Address: src.Prometheus})
		if err != nil {
			return nil, fmt.Errorf("prometheus %q: %w", src.Prometheus, err)
		}
		m.prom = v1.NewAPI(c)
		p, err := source.NewPrometheus(src.Prometheus, source.Presets["zeebe"])
		if err != nil {
			return nil, err
		}
		m.signals = p
		return m, nil
	}
	var targets []source.Target
	for _, s := range shards {
		u := src.Scrape[s.ID]
		if u == "" {
			u = s.Metadata[registryapi.MetaMetrics]
		}
		if u == "" {
			return nil, fmt.Errorf("shard %s: no metrics URL in its registration: give --scrape %s=URL or --prometheus URL", s.ID, s.ID)
		}
		targets = append(targets, source.Target{Name: s.ID, URL: u})
	}
	sc, err := source.NewScrape(targets, "zeebe", time.Second, window+time.Minute)
	if err != nil {
		return nil, err
	}
	m.scrape, m.signals = sc, sc
	ctx, cancel := context.WithCancel(context.Background())
	m.stop = cancel
	m.wg.Go(func() { sc.Run(ctx) })
	return m, nil
}

// close stops the background sampling and waits for it.
func (m *measurer) close() {
	m.stop()
	m.wg.Wait()
}

// ready waits, with scraping, until every shard was sampled twice (rates
// need two samples), and says which cannot be read after readyWithin.
func (m *measurer) ready(ctx context.Context) error {
	if m.scrape == nil {
		return nil
	}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	limit := time.After(readyWithin)
	for !m.scrape.Sampled(2) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-limit:
			var errs []string
			for name, err := range m.scrape.Errors() {
				errs = append(errs, name+": "+err.Error())
			}
			slices.Sort(errs)
			return fmt.Errorf("not every shard answered twice within %v: %s", readyWithin, strings.Join(errs, "; "))
		case <-tick.C:
		}
	}
	return nil
}

// readyWithin is how long the preflight waits for every shard's metrics.
const readyWithin = 30 * time.Second

// poolSignals evaluates the signals of some shards over window: the whole
// of them (Overall), and whether any of them had series at all.
func (m *measurer) poolSignals(ctx context.Context, ids []string, window time.Duration) (signals.Report, bool, error) {
	now := time.Now()
	step := max(window/60, time.Second)
	all, err := m.signals.Fetch(ctx, now, window, step)
	if err != nil {
		return signals.Report{}, false, err
	}
	var mine []signals.Shard
	for _, s := range all {
		if slices.Contains(ids, s.Name) {
			mine = append(mine, s)
		}
	}
	found := len(mine) > 0
	for _, id := range ids {
		if !slices.ContainsFunc(mine, func(s signals.Shard) bool { return s.Name == id }) {
			// A shard of the pool the source has nothing of: unknown.
			mine = append(mine, signals.Shard{Name: id, Missing: "no series in the metrics"})
		}
	}
	r := signals.Evaluate(mine, now, window, signals.DefaultThresholds().ForStep(step))
	return r, found, nil
}

// query runs PromQL and returns the values it found.
func (m *measurer) query(ctx context.Context, q string) ([]float64, error) {
	if m.prom == nil {
		return nil, errNoPrometheus
	}
	v, _, _, err := m.prom.Query(ctx, q, time.Now())
	if err != nil {
		var pe *v1.Error
		if errors.As(err, &pe) && pe.Type == v1.ErrBadData {
			return nil, &BadQueryError{Query: q, Err: err}
		}
		return nil, fmt.Errorf("prometheus: %w", err)
	}
	switch x := v.(type) {
	case model.Vector:
		out := make([]float64, 0, len(x))
		for _, s := range x {
			out = append(out, float64(s.Value))
		}
		return out, nil
	case *model.Scalar:
		return []float64{float64(x.Value)}, nil
	}
	return nil, fmt.Errorf("prometheus: %s returned a %s, want an instant vector or a scalar", q, v.Type())
}

// BadQueryError is PromQL the server could not parse or run: bad input,
// not a failing gate.
type BadQueryError struct {
	Query string
	Err   error
}

func (e *BadQueryError) Error() string { return fmt.Sprintf("bad PromQL %q: %v", e.Query, e.Err) }
func (e *BadQueryError) Unwrap() error { return e.Err }

// measure evaluates one gate now.
func (m *measurer) measure(ctx context.Context, g *Gate, p Pools, window time.Duration) Measurement {
	q, err := g.Resolve(p)
	if err != nil {
		return g.Judge(q, nil, err, time.Now())
	}
	if g.Signal == "" {
		res, err := m.query(ctx, q)
		return g.Judge(q, res, err, time.Now())
	}
	ids := p.To
	if g.Pool == "from" {
		ids = p.From
	}
	r, any, err := m.poolSignals(ctx, ids, window)
	if err != nil || !any || len(r.Unknown) > 0 {
		// A shard of the pool without current metrics: no data, which
		// the gate's noData decides on, never a pass by default.
		return g.Judge(q, nil, err, time.Now())
	}
	v, ok := signalFields[g.Signal](r.Overall)
	if g.Signal == "level" {
		v = float64(r.Level) // the worst of the pool's shards and their whole
	}
	if !ok {
		return g.Judge(q, nil, nil, time.Now())
	}
	return g.Judge(q, []float64{v}, nil, time.Now())
}
