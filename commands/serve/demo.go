package serve

import (
	"context"
	"fmt"
	"io"
	"log"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardctl/shardctl/commands/cmdutil"
	"github.com/shardctl/shardctl/commands/observe"
	"github.com/shardctl/shardctl/commands/output"
	"github.com/shardctl/shardctl/completions"
	"github.com/shardctl/shardctl/internal/demo"
	"github.com/shardctl/shardctl/internal/human"
	"github.com/shardctl/shardctl/internal/load"
	"github.com/shardctl/shardctl/internal/registry/registryapi"
	"github.com/shardctl/shardctl/internal/signals"
	"github.com/shardctl/shardctl/internal/source"
	"github.com/shardctl/shardctl/probes/proxies"
	"github.com/shardctl/shardctl/tui"
)

// DemoOptions runs a whole federation in one process.
type DemoOptions struct {
	g        *cmdutil.Globals
	cfg      demo.Config
	noTUI    bool
	duration time.Duration
	every    time.Duration
	printer  *output.Printer
}

// NewCmdDemo builds `shardctl demo`.
func NewCmdDemo(g *cmdutil.Globals) *cobra.Command {
	o := &DemoOptions{g: g}
	long := `Run a whole federation in this process: a registry, --shards simulated Zeebe
clusters that register and heartbeat, the proxy following the registry, a
load of --rate instances per second through the proxy (a one-task process
and a worker), and a scenario; then watch it in "shardctl top" (or, with
--no-tui, print the signals every --every). Point zbctl or any Zeebe client
at the gateway address it prints to try the federation yourself.

Scenarios:`
	for _, name := range demo.ScenarioNames() {
		long += fmt.Sprintf("\n  %-7s %s", name, demo.Scenarios[name])
	}
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run a registry, simulated shards, the proxy, a load and the dashboard, all in one process",
		Long:  long,
		Example: `  shardctl demo
  shardctl demo --scenario knee --shards 4 --rate 60
  shardctl demo --scenario drain --no-tui --duration 2m -o json`,
		Args:              cobra.NoArgs,
		GroupID:           cmdutil.GroupRuntime,
		ValidArgsFunction: cobra.NoFileCompletions,
		RunE:              cmdutil.RunOptions(o),
	}
	f := cmd.Flags()
	f.IntVar(&o.cfg.Shards, "shards", 3, "simulated shards (1-31)")
	f.Float64Var(&o.cfg.Rate, "rate", 50, "process instances per second offered through the proxy")
	f.StringVar(&o.cfg.Scenario, "scenario", "steady", "what happens while it runs: "+fmt.Sprint(demo.ScenarioNames()))
	f.StringVar(&o.cfg.Listen, "listen", "127.0.0.1:26500", "the proxy's gateway address for zbctl and clients, HOST:PORT (left at its default: a free port when that one is in use)")
	f.BoolVar(&o.noTUI, "no-tui", false, "print the signals every --every instead of the dashboard (JSON lines with -o json)")
	f.DurationVar(&o.duration, "duration", 0, "stop after this long (0: at Ctrl-C)")
	f.DurationVar(&o.every, "every", 10*time.Second, "with --no-tui: how often to print the signals")
	_ = cmd.RegisterFlagCompletionFunc("scenario", completions.Values(demo.ScenarioNames()...))
	return cmd
}

func (o *DemoOptions) Complete(cmd *cobra.Command, _ []string) (err error) {
	o.cfg.ListenOrFree = !cmd.Flags().Changed("listen")
	o.printer, err = o.g.Printer()
	return err
}

func (o *DemoOptions) Validate() error {
	if err := checkListenFlags(map[string]string{"--listen": o.cfg.Listen}); err != nil {
		return err
	}
	if o.duration < 0 || o.every < time.Second {
		return fmt.Errorf("--duration not negative, --every at least 1s")
	}
	return o.cfg.Validate()
}

func (o *DemoOptions) Run(ctx context.Context) error {
	errOut := o.g.Streams.ErrOut
	tty := cmdutil.IsTerminal(o.g.Streams.Out)
	if !o.noTUI && !tty {
		return fmt.Errorf("the dashboard needs a terminal: add --no-tui to print the signals instead")
	}
	if o.duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.duration)
		defer cancel()
	}
	// The Zeebe client's job workers write their errors with the standard
	// logger, over the dashboard and after it (a worker polling a proxy
	// that stops); the load's counts say what failed instead.
	log.SetOutput(io.Discard)
	fmt.Fprintf(errOut, "starting a registry, simulated shards and the proxy (scenario %s)…\n", o.cfg.Scenario)
	started := time.Now()
	d, err := demo.Start(ctx, o.cfg)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	defer func() {
		stop, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = d.Close(stop)
		fmt.Fprintln(errOut, loadSummary(time.Since(started), d.Load()))
	}()
	fmt.Fprintf(errOut, "listening on %s\n", d.GatewayAddr())
	if addr := d.GatewayAddr().String(); addr != o.cfg.Listen {
		fmt.Fprintf(errOut, "(%s is in use: the gateway took a free port)\n", o.cfg.Listen)
	}
	fmt.Fprintf(errOut, "gateway   zbctl status --address %s --insecure\n", d.GatewayAddr())
	fmt.Fprintf(errOut, "registry  shardctl --registry %s shards list\n", d.RegistryURL())
	fmt.Fprintf(errOut, "proxy     http://%s/shards  http://%s/metrics\n", d.AdminAddr(), d.AdminAddr())
	fmt.Fprintf(errOut, "scenario  %s: %s\n", o.cfg.Scenario, demo.Scenarios[o.cfg.Scenario])

	scrape, err := source.NewScrape(d.Targets(), "zeebe", time.Second, 6*time.Minute)
	if err != nil {
		return err
	}
	go scrape.Run(ctx)
	const window = 5 * time.Minute
	snapshot := observe.WithStates(observe.Snapshots(scrape, window, time.Second), d.Registry(), proxies.Admin{}, registryapi.DefaultShardsApp)
	if o.noTUI {
		return o.print(ctx, d, snapshot)
	}
	// The addresses above are behind the dashboard once it draws: the
	// gateway, what a user points a client at, is in its header.
	return observe.RunDashboard(ctx, o.g, tui.New(tui.Options{Fetch: snapshot, Refresh: 2 * time.Second,
		Source: fmt.Sprintf("demo %s · gateway %s", o.cfg.Scenario, d.GatewayAddr()), Window: window,
		Note: func() string {
			if ev := d.Events(); len(ev) > 0 {
				return "scenario: " + ev[len(ev)-1]
			}
			return "scenario: " + demo.Scenarios[o.cfg.Scenario]
		}}))
}

// loadSummary says what the demo's load did, in a line.
func loadSummary(ran time.Duration, st load.Stats) string {
	line := fmt.Sprintf("stopped after %s: %s instances offered, %s created, %s completed", human.Duration(ran),
		human.Count(float64(st.Offered)), human.Count(float64(st.Created)), human.Count(float64(st.Completed)))
	if st.Refused > 0 {
		line += fmt.Sprintf(", %s refused (RESOURCE_EXHAUSTED)", human.Count(float64(st.Refused)))
	}
	if st.Failed > 0 {
		line += fmt.Sprintf(", %s failed", human.Count(float64(st.Failed)))
	}
	if st.Skipped > 0 {
		line += fmt.Sprintf(", %s not sent (too many awaiting an answer)", human.Count(float64(st.Skipped)))
	}
	return line
}

// print writes the signals every --every until the demo ends.
func (o *DemoOptions) print(ctx context.Context, d *demo.Demo, snapshot func(context.Context) (signals.Snapshot, error)) error {
	stream := o.printer.Stream()
	seen := 0
	t := time.NewTicker(o.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		for _, e := range d.Events()[seen:] {
			fmt.Fprintln(o.g.Streams.ErrOut, "scenario:", e)
			seen++
		}
		snap, err := snapshot(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			fmt.Fprintf(o.g.Streams.ErrOut, "signals: %v\n", err)
			continue
		}
		if err := stream.Emit(observe.SignalsView{Report: snap.Report}); err != nil {
			return err
		}
	}
}
