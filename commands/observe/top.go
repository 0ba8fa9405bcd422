package observe

import (
	"context"
	"fmt"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/colorprofile"
	"github.com/spf13/cobra"

	"github.com/shardctl/shardctl/commands/cmdutil"
	"github.com/shardctl/shardctl/tui"
)

// TopOptions runs the live dashboard.
type TopOptions struct {
	g *cmdutil.Globals
	signalSource
	refresh time.Duration
}

// NewCmdTop builds `shardctl top`.
func NewCmdTop(g *cmdutil.Globals) *cobra.Command {
	o := &TopOptions{g: g, signalSource: signalSource{g: g}}
	cmd := &cobra.Command{
		Use:   "top",
		Short: "Watch every shard's scissors, queue and latency heatmap live",
		Long: `A live dashboard of the signals "shardctl signals" evaluates, from the same
source (--prometheus, --scrape, or --registry alone: every shard it lists, at
its registered metrics URL): one row per shard with its level, the scissors
(instances created vs completed), the queue and its trend, and a latency
heatmap strip; enter opens a shard's full-size charts.

With --registry (or SHARDCTL_REGISTRY) each row also shows the shard's state
(UP, DRAIN, OOS, DOWN) and what the proxies see: a shard a proxy holds DOWN
is DOWN, one the registry dropped while a proxy still routes to it stays
listed, and the proxies' refusals of new instances show for the federation
and per shard (REF). A shard whose metrics stopped is "? stale", never ok.

Keys: ↑/↓ select · enter detail · esc back · / filter · s sort (name, level,
ratio, queue) · p pause · ? help · q quit. --no-color (or NO_COLOR) draws
in monochrome: the glyphs carry the meaning.`,
		Example: `  shardctl top --registry http://registry:8761/eureka
  shardctl top --prometheus http://prometheus:9090
  shardctl top --scrape blue=http://10.0.0.5:9600/metrics --scrape green=http://10.0.1.5:9600/metrics --window 5m`,
		Args:              cobra.NoArgs,
		GroupID:           cmdutil.GroupObserve,
		ValidArgsFunction: cobra.NoFileCompletions,
		RunE:              cmdutil.RunOptions(o),
	}
	o.addFlags(cmd, 15*time.Minute)
	cmd.Flags().DurationVar(&o.refresh, "refresh", 2*time.Second, "how often to fetch and redraw")
	return cmd
}

func (o *TopOptions) Complete(*cobra.Command, []string) error { return nil }

func (o *TopOptions) Validate() error {
	if o.refresh < 100*time.Millisecond {
		return fmt.Errorf("--refresh %v: want at least 100ms", o.refresh)
	}
	return o.open()
}

// RunDashboard runs the TUI until q or ctx ends; --no-color, NO_COLOR and
// TERM=dumb draw it in monochrome.
func RunDashboard(ctx context.Context, g *cmdutil.Globals, m *tui.Model) error {
	opts := []tea.ProgramOption{tea.WithContext(ctx)}
	if g.NoColor || g.Getenv("NO_COLOR") != "" || g.Getenv("TERM") == "dumb" {
		opts = append(opts, tea.WithColorProfile(colorprofile.Ascii))
	}
	_, err := tea.NewProgram(m, opts...).Run()
	if err != nil && ctx.Err() != nil {
		return nil // SIGINT/SIGTERM or the end of a --duration: a normal way out
	}
	return err
}

func (o *TopOptions) Run(ctx context.Context) error {
	if !cmdutil.IsTerminal(o.g.Streams.Out) {
		return fmt.Errorf("top draws on a terminal; without one use \"shardctl signals --watch -o json\"")
	}
	if o.scrape != nil {
		go o.scrape.Run(ctx)
	}
	fetch, err := o.fetcher()
	if err != nil {
		return err
	}
	return RunDashboard(ctx, o.g, tui.New(tui.Options{Fetch: fetch, Refresh: o.refresh, Source: o.describe(), Window: o.window}))
}
