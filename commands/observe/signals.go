package observe

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/charmbracelet/x/ansi"
	"github.com/spf13/cobra"

	"github.com/shardctl/shardctl/commands/cmdutil"
	"github.com/shardctl/shardctl/commands/output"
	"github.com/shardctl/shardctl/completions"
	"github.com/shardctl/shardctl/internal/human"
	"github.com/shardctl/shardctl/internal/registry/registryapi"
	"github.com/shardctl/shardctl/internal/registry/registryclient"
	"github.com/shardctl/shardctl/internal/signals"
	"github.com/shardctl/shardctl/internal/source"
	"github.com/shardctl/shardctl/migrate"
	"github.com/shardctl/shardctl/probes/discover"
	"github.com/shardctl/shardctl/probes/proxies"
)

// signalSource is the flags and the source that `signals` and `top`
// share: Prometheus (--prometheus) or scraping (--scrape), a preset.
type signalSource struct {
	g                        *cmdutil.Globals
	preset, queries, groupBy string
	app                      string // of the shards, with the registry
	window, step, rate       time.Duration

	src    source.Source
	scrape *source.Scrape
	// discovered: the scrape's targets come from the registry.
	discovered bool
}

func (s *signalSource) addFlags(cmd *cobra.Command, window time.Duration) {
	f := cmd.Flags()
	f.StringVar(&s.preset, "preset", "zeebe", "query preset: zeebe (Zeebe's metrics) or proxy (shardctl proxy's)")
	f.StringVar(&s.queries, "queries", "", "YAML file overriding the preset's PromQL (groupBy, created, completed, queue, latency, dropped, received, throttled)")
	f.StringVar(&s.groupBy, "group-by", "", "label that names a shard (default: cluster when present, else the scrape target)")
	f.DurationVar(&s.window, "window", window, "how far back to read")
	f.DurationVar(&s.step, "step", 0, "resolution of the series (default: window/120, at least 5s; with --scrape 1s)")
	f.DurationVar(&s.rate, "rate", 0, "with --prometheus: the range of rate() (default: 4 steps, at least 30s; at least 4 scrape intervals)")
	f.StringVar(&s.app, "app", registryapi.DefaultShardsApp, "registry application of the shards (with --registry)")
	_ = cmd.RegisterFlagCompletionFunc("preset", completions.Values("zeebe", "proxy"))
}

// open checks the flags and builds the source.
func (s *signalSource) open() error {
	if s.window < 30*time.Second || s.step < 0 || s.rate < 0 {
		return fmt.Errorf("--window at least 30s; --step and --rate not negative")
	}
	prom := s.g.PrometheusURL()
	switch {
	case prom != "" && len(s.g.Scrape) > 0:
		return fmt.Errorf("--prometheus and --scrape both given: pick one source")
	case prom == "" && len(s.g.Scrape) == 0 && !s.g.RegistryNamed():
		return fmt.Errorf("no source: give --prometheus URL (or SHARDCTL_PROMETHEUS), --scrape [NAME=]URL for each shard, or --registry URL to scrape the shards it lists")
	case prom != "":
		p, err := source.LoadPreset(s.preset, s.queries)
		if err != nil {
			return err
		}
		if s.groupBy != "" {
			p.GroupBy = s.groupBy
		}
		src, err := source.NewPrometheus(prom, p)
		if err != nil {
			return err
		}
		src.Rate = s.rate
		s.src = src
		if s.step == 0 {
			s.step = max(s.window/120, 5*time.Second)
		}
	default:
		if s.queries != "" || s.groupBy != "" {
			return fmt.Errorf("--queries and --group-by are PromQL: they need --prometheus")
		}
		var targets []source.Target
		for _, v := range s.g.Scrape {
			t, err := source.ParseTarget(v)
			if err != nil {
				return err
			}
			targets = append(targets, t)
		}
		if s.step == 0 {
			s.step = time.Second
		}
		sc, err := source.NewScrape(targets, s.preset, s.step, s.window+time.Minute)
		if err != nil {
			return err
		}
		if len(targets) == 0 {
			// Every shard the registry lists, at its registered metrics URL.
			c, err := s.g.RegistryClient("", "")
			if err != nil {
				return err
			}
			if s.preset != "zeebe" {
				return fmt.Errorf("--preset %s with the registry's shards: the registry lists the shards' metrics, give --scrape for the proxy's", s.preset)
			}
			admin, err := s.g.ProxyAdmin()
			if err != nil {
				return err
			}
			sc.Discover = (&discover.RegistryTargets{Registry: c, App: s.app, Admin: admin}).Find
			s.discovered = true
		}
		s.src, s.scrape = sc, sc
	}
	return nil
}

// describe names the source for headers.
func (s *signalSource) describe() string {
	if s.scrape != nil {
		return fmt.Sprintf("%s, scraping %s", s.preset, s.scraped())
	}
	return fmt.Sprintf("%s via %s", s.preset, s.g.PrometheusURL())
}

// scraped names what a scraping source reads.
func (s *signalSource) scraped() string {
	if s.discovered {
		return "the shards of " + s.g.RegistryURL()
	}
	return fmt.Sprintf("%d targets", len(s.g.Scrape))
}

// snapshot fetches and evaluates once.
func (s *signalSource) snapshot(ctx context.Context) (signals.Snapshot, error) {
	return Snapshots(s.src, s.window, s.step)(ctx)
}

// Snapshots reads src's last window at step and evaluates the signals,
// each time it is called.
func Snapshots(src source.Source, window, step time.Duration) func(context.Context) (signals.Snapshot, error) {
	return func(ctx context.Context) (signals.Snapshot, error) {
		now := time.Now()
		fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		shards, err := src.Fetch(fctx, now, window, step)
		if err != nil {
			return signals.Snapshot{}, err
		}
		return signals.Take(shards, now, window, signals.DefaultThresholds().ForStep(step)), nil
	}
}

// WithStates adds the shards' registry states to every snapshot, and
// what the proxies see: a shard a proxy holds DOWN is DOWN on the screen
// too, one the registry dropped while a proxy still routes to it stays,
// a shard the proxies pace or refuse says so (and why) among its reasons,
// and the proxies' refusals show beside the shards' backpressure. A
// registry or a proxy that does not answer leaves its part out, not the
// pictures.
func WithStates(fetch func(context.Context) (signals.Snapshot, error), c *registryclient.Client, admin proxies.Admin, app string) func(context.Context) (signals.Snapshot, error) {
	meter := &proxies.Meter{}
	return func(ctx context.Context) (signals.Snapshot, error) {
		snap, err := fetch(ctx)
		if err != nil {
			return snap, err
		}
		shards, err := c.Shards(ctx, app)
		if err != nil {
			return snap, nil
		}
		snap.States = map[string]string{}
		for _, s := range shards {
			snap.States[s.ID] = s.State
		}
		views, _ := admin.Read(ctx, c)
		if snap.Federation, _ = migrate.FederationOf(ctx, c, app, shards, views); snap.Federation != nil {
			snap.Federation.Refusals = meter.Read(ctx, views)
		}
		snap.HoldDown()
		snap.NoteAdmission()
		snap.CountRefusals()
		return snap, nil
	}
}

// fetcher is the snapshot source top and signals read: with a registry
// named, enriched by what it and the proxies say.
func (s *signalSource) fetcher() (func(context.Context) (signals.Snapshot, error), error) {
	if !s.g.RegistryNamed() {
		return s.snapshot, nil
	}
	c, err := s.g.RegistryClient("", "")
	if err != nil {
		return nil, err
	}
	admin, err := s.g.ProxyAdmin()
	if err != nil {
		return nil, err
	}
	return WithStates(s.snapshot, c, admin, s.app), nil
}

// SignalsOptions evaluates the degradation signals once, or on a watch.
type SignalsOptions struct {
	g *cmdutil.Globals
	signalSource
	sample, every time.Duration
	failOn        string
	noData        string
	watch         bool

	printer *output.Printer
	level   signals.Level
	fetch   func(context.Context) (signals.Snapshot, error)
}

// NewCmdSignals builds `shardctl signals`.
func NewCmdSignals(g *cmdutil.Globals) *cobra.Command {
	o := &SignalsOptions{g: g, signalSource: signalSource{g: g}}
	cmd := &cobra.Command{
		Use:   "signals",
		Short: "Evaluate the scissors, queue and heatmap of every shard: ok, warn or critical",
		Long: `Read the three pictures of a degrading Zeebe cluster from Prometheus
(--prometheus, env SHARDCTL_PROMETHEUS) or straight from /metrics endpoints
(--scrape [NAME=]URL, repeatable; no server needed), per shard and overall:

  scissors   instances created vs completed per second, their ratio, and how
             long it has stayed below the plan and act ratios
  queue      records appended but not processed, its least-squares slope and
             whether it grows as a line
  heatmap    processing latency by bucket over time: p50, p99, the share at
             a second or more
  and        backpressure drops, the debt the window added (created minus
             completed), and when the shard will have caught up: the queue
             drained at the pace it falls now, then the debt paid at the
             pace the window shows (instances created and completed a
             second, at best over 5 s)

` + ansi.Wordwrap(signals.DefaultThresholds().Levels(), 78, "") + `
The exit code is 3 when the level reaches --fail-on, for runbooks and CI
gates. A shard whose metrics stopped (no sample for 15 s, or three steps)
is unknown, never ok: with --no-data fail (the default) that is exit 3 too,
with inconclusive exit 6, with pass exit 0 (it is still listed).

With --scrape there is no history: shardctl samples for --sample first.`,
		Example: `  shardctl signals --prometheus http://prometheus:9090
  shardctl signals --scrape blue=http://10.0.0.5:9600/metrics --scrape green=http://10.0.1.5:9600/metrics
  shardctl signals --fail-on warn -o json | jq '.shards[] | {name, level, reasons}'
  shardctl signals --watch --every 30s`,
		Args:              cobra.NoArgs,
		GroupID:           cmdutil.GroupObserve,
		ValidArgsFunction: cobra.NoFileCompletions,
		RunE:              cmdutil.RunOptions(o),
	}
	o.addFlags(cmd, 10*time.Minute)
	f := cmd.Flags()
	f.DurationVar(&o.sample, "sample", 15*time.Second, "with --scrape: how long to sample before the first evaluation")
	f.StringVar(&o.failOn, "fail-on", "critical", "exit 3 when the level reaches this: warn or critical")
	f.StringVar(&o.noData, "no-data", migrate.NoDataFail, "what a shard without current metrics means: fail (exit 3), inconclusive (exit 6) or pass")
	_ = cmd.RegisterFlagCompletionFunc("no-data", completions.Values(migrate.NoDataFail, migrate.NoDataInconclusive, migrate.NoDataPass))
	f.BoolVar(&o.watch, "watch", false, "evaluate again every --every and print each report (JSON lines with -o json)")
	f.DurationVar(&o.every, "every", 15*time.Second, "with --watch: how often to evaluate")
	_ = cmd.RegisterFlagCompletionFunc("fail-on", completions.Values("warn", "critical"))
	return cmd
}

func (o *SignalsOptions) Complete(*cobra.Command, []string) (err error) {
	o.printer, err = o.g.Printer()
	return err
}

func (o *SignalsOptions) Validate() error {
	lvl, err := signals.ParseLevel(o.failOn)
	if err != nil || lvl <= signals.OK {
		return fmt.Errorf("--fail-on %q: want warn or critical", o.failOn)
	}
	o.level = lvl
	switch o.noData {
	case migrate.NoDataFail, migrate.NoDataInconclusive, migrate.NoDataPass:
	default:
		return fmt.Errorf("--no-data %q: want fail, inconclusive or pass", o.noData)
	}
	if o.sample < 2*time.Second || o.every < time.Second {
		return fmt.Errorf("--sample at least 2s, --every at least 1s")
	}
	if err := o.open(); err != nil {
		return err
	}
	o.fetch, err = o.fetcher()
	return err
}

func (o *SignalsOptions) Run(ctx context.Context) error {
	errOut := o.g.Streams.ErrOut
	if o.scrape != nil {
		go o.scrape.Run(ctx)
		if !o.printer.Format.Machine() {
			fmt.Fprintf(errOut, "sampling %s for %v…\n", o.scraped(), o.sample)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(o.sample):
		}
	}
	if !o.watch {
		r, err := o.evaluate(ctx)
		if err != nil {
			return err
		}
		if err := o.printer.Print(SignalsView{r}); err != nil {
			return err
		}
		return o.verdict(r)
	}
	stream := o.printer.Stream()
	t := time.NewTicker(o.every)
	defer t.Stop()
	for {
		r, err := o.evaluate(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			fmt.Fprintf(errOut, "signals: %v\n", err)
		} else if err := stream.Emit(SignalsView{r}); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// verdict is the exit of one evaluation: a level at --fail-on refuses;
// a shard whose level is unknown is what --no-data says (a cutover
// gate's noData policies), never a pass unless it says pass.
func (o *SignalsOptions) verdict(r signals.Report) error {
	if r.Level >= o.level {
		return cmdutil.Refused(fmt.Errorf("signals are %s (--fail-on %s)", r.Level, o.failOn))
	}
	if len(r.Unknown) == 0 {
		return nil
	}
	err := fmt.Errorf("no current metrics from %s (--no-data %s)", strings.Join(r.Unknown, ", "), o.noData)
	switch o.noData {
	case migrate.NoDataPass:
		return nil
	case migrate.NoDataInconclusive:
		return &cmdutil.ExitError{Code: cmdutil.ExitUnknown, Err: err}
	}
	return cmdutil.Refused(err)
}

// evaluate reads the source once; a target that does not answer is a
// shard of unknown level in the report, with why.
func (o *SignalsOptions) evaluate(ctx context.Context) (signals.Report, error) {
	snap, err := o.fetch(ctx)
	return snap.Report, err
}

// SignalsView prints a report: the whole first, then each shard.
type SignalsView struct{ signals.Report }

func (SignalsView) Header(wide bool) []string {
	h := []string{"SHARD", "LEVEL", "CREATED/S", "COMPLETED/S", "RATIO", "QUEUE", "QUEUE/S", "P99", "DROPS", "REASON"}
	if wide {
		h = append(h[:len(h)-1], "P50", "≥1S", "DEBT", "ETA", "REASONS")
	}
	return h
}

func (v SignalsView) Rows(wide bool, c output.Colors) [][]string {
	rows := [][]string{signalRow(v.Overall, wide, c)}
	for _, s := range v.Shards {
		rows = append(rows, signalRow(s, wide, c))
	}
	return rows
}

func signalRow(s signals.Signals, wide bool, c output.Colors) []string {
	level := s.Level.String()
	switch s.Level {
	case signals.Critical:
		level = c.Bad(level)
	case signals.Warn, signals.Unknown:
		level = c.Warn(level)
	default:
		level = c.Good(level)
	}
	if s.Level == signals.Unknown {
		// No numbers: the last a stopped shard had are not its numbers now.
		row := []string{s.Name, level}
		for range len(SignalsView{}.Header(wide)) - 3 {
			row = append(row, human.None)
		}
		return append(row, strings.Join(s.Reasons, "; "))
	}
	row := []string{s.Name, level, human.Rate(s.CreatedPerSec), human.Rate(s.CompletedPerSec),
		human.Or(s.Ratio, human.Percent), human.Count(s.Queue), fmt.Sprintf("%+.1f", s.QueueSlope), human.Or(s.P99, human.Latency),
		human.Percent(s.DropShare)}
	if !wide {
		reason := human.None
		if len(s.Reasons) > 0 {
			reason = s.Reasons[0]
		}
		return append(row, reason)
	}
	eta := human.None
	switch {
	case s.Recovery != nil:
		eta = s.Recovery.When()
	case s.Debt >= 1:
		eta = "not recovering"
	}
	reasons := strings.Join(s.Reasons, "; ")
	if reasons == "" {
		reasons = human.None
	}
	return append(row, human.Or(s.P50, human.Latency), human.Percent(s.SlowShare), human.Count(s.Debt), eta, reasons)
}
