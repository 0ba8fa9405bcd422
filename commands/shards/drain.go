package shards

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardctl/shardctl/commands/cmdutil"
	"github.com/shardctl/shardctl/commands/output"
	"github.com/shardctl/shardctl/completions"
	"github.com/shardctl/shardctl/internal/backlog"
	"github.com/shardctl/shardctl/internal/registry/registryapi"
	"github.com/shardctl/shardctl/internal/registry/registryclient"
	"github.com/shardctl/shardctl/migrate/drain"
)

// DrainOptions drains shards: DRAINING at once, and with --wait until
// empty, then OUT_OF_SERVICE.
type DrainOptions struct {
	f          *cmdutil.RegistryFlags
	ids        []string
	wait       bool
	timeout    time.Duration
	poll       time.Duration
	stuckAfter int
	// shards is how a stuck shard's REST API is asked what it runs.
	shards cmdutil.ShardAccessFlags

	printer *output.Printer
	c       *registryclient.Client
	reader  backlog.Reader
}

// NewCmdDrain builds `shardctl drain`.
func NewCmdDrain(g *cmdutil.Globals) *cobra.Command {
	o := &DrainOptions{f: &cmdutil.RegistryFlags{Globals: g}}
	cmd := &cobra.Command{
		Use:   "drain SHARD...",
		Short: "Take shards out of placement and, with --wait, follow them until they hold nothing",
		Long: `Set each shard DRAINING in the registry: the proxy places no new instance and
no start-event message there, and keeps serving every key the shard owns (jobs,
cancels, variables, incidents, messages to waiting instances).

With --wait, follow each shard until it is empty, read from its own metrics
(--prometheus, --scrape SHARD=URL, else the metrics URL of its registration):
no root instance in flight, nothing committed and not processed or exported,
no open incident, for two polls in a row (messages still buffered there start
nothing and correlate with nothing once no instance is left). Then set it
OUT_OF_SERVICE. Every poll prints one line per shard with an ETA at the rate it
empties; a shard that makes no progress for --stuck-after polls says what
blocks it, and the wait goes on. Missing data never counts as empty.

Exit codes: 0 every shard empty and OUT_OF_SERVICE (or DRAINING, without
--wait); 4 --timeout passed first (the shards stay DRAINING; the last line
says what is left); 1 a shard is unknown (nothing changed) or a service cannot
be reached. "shardctl undrain SHARD..." reverses a drain at any point.`,
		Example: `  shardctl drain blue-1
  shardctl drain blue-1 blue-2 --wait --timeout 30m
  shardctl drain blue-1 --wait --prometheus http://prometheus:9090 -o json`,
		Args:              cobra.MinimumNArgs(1),
		GroupID:           cmdutil.GroupOperate,
		ValidArgsFunction: completions.ShardIDs(o.f.Catalog),
		RunE:              cmdutil.RunOptions(o),
	}
	f := cmd.Flags()
	f.BoolVar(&o.wait, "wait", false, "follow the shards until they are empty, then set them OUT_OF_SERVICE")
	f.DurationVar(&o.timeout, "timeout", 30*time.Minute, "with --wait: give up after this long (exit 4; the shards stay DRAINING)")
	f.DurationVar(&o.poll, "poll", drain.DefaultPoll, "with --wait: how often to read each shard")
	f.IntVar(&o.stuckAfter, "stuck-after", drain.DefaultStuckAfter, "with --wait: polls without progress before saying what blocks a shard")
	o.shards.AddFlags(f)
	o.f.AddFlags(cmd.Flags())
	return cmd
}

func (o *DrainOptions) Complete(_ *cobra.Command, args []string) (err error) {
	o.ids = args
	if o.printer, err = o.f.Globals.Printer(); err != nil {
		return err
	}
	if o.c, err = o.f.Client(); err != nil {
		return err
	}
	if o.wait {
		o.reader, err = cmdutil.BacklogReader(o.f.Globals)
	}
	return err
}

func (o *DrainOptions) Validate() error {
	if o.wait && (o.timeout <= 0 || o.poll <= 0 || o.stuckAfter < 1) {
		return fmt.Errorf("--timeout and --poll must be positive, --stuck-after at least 1")
	}
	return nil
}

func (o *DrainOptions) Run(ctx context.Context) error {
	events := newDrainPrinter(o.printer, o.f.Globals.Streams.Out)
	access, err := o.shards.Access(nil)
	if err != nil {
		return err
	}
	defer access.Close()
	d := &drain.Helper{Registry: o.c, App: o.f.App, Backlog: o.reader, Poll: o.poll, StuckAfter: o.stuckAfter, OnEvent: events.print, Shards: access}
	shards, err := d.Begin(ctx, o.ids)
	if err != nil {
		return err
	}
	if !o.wait {
		return events.err
	}
	wctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	err = d.Wait(wctx, shards)
	var ne *drain.NotEmptyError
	switch {
	case errors.As(err, &ne) && errors.Is(err, context.DeadlineExceeded):
		return cmdutil.TimedOut(fmt.Errorf("drain %s after %v; undrain with \"shardctl undrain %s\", or wait again with --wait", ne.Error(), o.timeout, strings.Join(o.ids, " ")))
	case errors.As(err, &ne):
		return fmt.Errorf("drain %s; follow it again with \"shardctl drain %s --wait\"", ne.Error(), strings.Join(o.ids, " "))
	case err != nil:
		return err
	}
	return events.err
}

// drainPrinter prints a drain's events: lines (with a bar on a terminal),
// or JSON lines / YAML documents.
type drainPrinter struct {
	p      *output.Printer
	stream *output.Stream
	tty    bool
	out    io.Writer
	err    error
}

func newDrainPrinter(p *output.Printer, out io.Writer) *drainPrinter {
	return &drainPrinter{p: p, stream: p.Stream(), out: out, tty: cmdutil.IsTerminal(out)}
}

func (dp *drainPrinter) print(e drain.Event) {
	if dp.err != nil {
		return
	}
	if dp.p.Format.Machine() {
		dp.err = dp.stream.Emit(e)
		return
	}
	line := e.Line()
	if dp.tty && e.Event == drain.EventProgress {
		line = output.Bar(e.Done, 20) + " " + line
	}
	switch e.Event {
	case drain.EventStuck:
		line = dp.p.Colors.Warn(line)
	case drain.EventEmpty:
		line = dp.p.Colors.Good(line)
	}
	_, dp.err = fmt.Fprintln(dp.out, line)
}

// UndrainOptions sets shards UP again.
type UndrainOptions struct {
	f       *cmdutil.RegistryFlags
	ids     []string
	printer *output.Printer
	c       *registryclient.Client
}

// NewCmdUndrain builds `shardctl undrain`.
func NewCmdUndrain(g *cmdutil.Globals) *cobra.Command {
	o := &UndrainOptions{f: &cmdutil.RegistryFlags{Globals: g}}
	cmd := &cobra.Command{
		Use:   "undrain SHARD...",
		Short: "Set drained shards UP again: they take new instances at once",
		Long: `Set each shard UP in the registry, whether it is DRAINING or OUT_OF_SERVICE: the
proxy places new instances there again at once. Every shard is looked up first;
an unknown one changes nothing (exit 1).`,
		Example:           `  shardctl undrain blue-1 blue-2`,
		Args:              cobra.MinimumNArgs(1),
		GroupID:           cmdutil.GroupOperate,
		ValidArgsFunction: completions.ShardIDs(o.f.Catalog),
		RunE:              cmdutil.RunOptions(o),
	}
	o.f.AddFlags(cmd.Flags())
	return cmd
}

func (o *UndrainOptions) Complete(_ *cobra.Command, args []string) (err error) {
	o.ids = args
	if o.printer, err = o.f.Globals.Printer(); err != nil {
		return err
	}
	o.c, err = o.f.Client()
	return err
}

func (o *UndrainOptions) Validate() error { return nil }

func (o *UndrainOptions) Run(ctx context.Context) error {
	shards, err := drain.Undrain(ctx, o.c, o.f.App, o.ids)
	if err != nil {
		return err
	}
	if o.printer.Format.Machine() {
		return o.printer.Print(struct {
			Shards []registryapi.Shard `json:"shards"`
		}{shards})
	}
	for _, s := range shards {
		fmt.Fprintf(o.f.Globals.Streams.Out, "shard %s %s\n", s.ID, s.State)
	}
	return nil
}
