package commands

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardctl/shardctl/commands/output"
	"github.com/shardctl/shardctl/completions"
	"github.com/shardctl/shardctl/internal/human"
	"github.com/shardctl/shardctl/internal/registry"
	"github.com/shardctl/shardctl/migrate"
	"github.com/shardctl/shardctl/probes/source"
)

// NewCmdCutover builds `shardctl cutover`.
func NewCmdCutover(g *Globals) *cobra.Command {
	f := &shardsFlags{g: g}
	cmd := &cobra.Command{
		Use:   "cutover",
		Short: "Move new work from one pool of shards to another, step by step, gated by signals; then drain the old pool",
		Long: `A Blue-Green cutover for a workflow engine is a drain-out: Zeebe cannot move a
running instance, so new instances move from the old pool (--from, blue) to
the new one (--to, green) step by step, while the old pool keeps serving every
key it owns until it holds nothing.

  plan      print every step, the gates with their resolved queries, and what
            applying changes; --out saves it with a fingerprint of the registry
  apply     run the steps: preflight (green UP, topology healthy, ledger
            replayed, signals ok, gates answering), the weights step by step
            with the gates re-checked during each --step-pause, blue DRAINING,
            the drain to empty, blue OUT_OF_SERVICE. A failed gate rolls back by
            itself. The cutover is a record in the registry with a lease: a
            second apply is refused, an apply after a crash resumes.
  status    the phase, step, weights, each gate's last value and the drain
  promote   let a paused cutover go on (and run it to its end)
  rollback  send new work back to blue at once, undrain it; --drain-target
            drains green too

Exit codes: 0 done (or reached what --wait-for asks), 1 error, 2 usage, 3 a gate
failed and the cutover rolled back (or a preflight, a lease or a plan refused),
4 timed out (the drain; the cutover stays where it is and apply resumes it),
5 paused waiting for cutover promote, 6 inconclusive (a gate without data under
noData: inconclusive).`,
		GroupID: "operate",
		Args:    cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return Usagef("missing subcommand: use plan, apply, status, promote or rollback")
		},
	}
	f.addFlags(cmd.PersistentFlags())
	cmd.AddCommand(newCmdCutoverPlan(f), newCmdCutoverApply(f), newCmdCutoverStatus(f), newCmdCutoverPromote(f), newCmdCutoverRollback(f))
	return cmd
}

// planFlags are the flags that make a plan (plan and apply).
type planFlags struct {
	opts      migrate.PlanOptions
	steps     string
	gatesFile string
}

func (pf *planFlags) add(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&pf.opts.From, "from", "", "the pool new work leaves (blue)")
	f.StringVar(&pf.opts.To, "to", "", "the pool new work moves to (green)")
	f.StringVar(&pf.opts.Name, "name", "", "name of the cutover (default FROM-to-TO)")
	f.StringVar(&pf.steps, "steps", "10,50,100", "percentages of new instances the target pool gets, step by step")
	f.DurationVar(&pf.opts.StepPause, "step-pause", migrate.DefaultStepPause, "how long each step holds while the gates watch")
	f.StringVar(&pf.gatesFile, "gates", "", "YAML file of gates (query or signal, successCondition, failureCondition, interval, count, failureLimit, consecutiveErrorLimit, noData); default: the target pool's signals not critical")
	f.DurationVar(&pf.opts.GateWindow, "gate-window", migrate.DefaultGateWindow, "how far back the preflight and signal gates read")
	f.DurationVar(&pf.opts.DrainTimeout, "drain-timeout", migrate.DefaultDrainTimeout, "how long the old pool may take to empty (exit 4 after; apply resumes)")
	f.StringVar(&pf.opts.PauseBefore, "pause-before", "", "pause for cutover promote before: promote (the last weight step) or drain")
	_ = cmd.RegisterFlagCompletionFunc("pause-before", completions.Values(migrate.PausePromote, migrate.PauseDrain))
}

// complete reads the flags into plan options (usage errors exit 2, a bad
// gates file 1).
func (pf *planFlags) complete(app string) error {
	pf.opts.App = app
	pf.opts.Steps = nil
	for _, v := range strings.Split(pf.steps, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil {
			return Usagef("--steps %q: want percentages such as 10,50,100", pf.steps)
		}
		pf.opts.Steps = append(pf.opts.Steps, n)
	}
	if pf.gatesFile != "" {
		gates, err := migrate.LoadGates(pf.gatesFile)
		if err != nil {
			return err
		}
		pf.opts.Gates = gates
	}
	return nil
}

// sources are where a cutover reads signals and gates: the global flags.
func cutoverSources(g *Globals) (migrate.Sources, error) {
	src := migrate.Sources{Prometheus: g.PrometheusURL(), Scrape: map[string]string{}}
	if src.Prometheus != "" && len(g.Scrape) > 0 {
		return src, Usagef("--prometheus and --scrape both given: pick one source")
	}
	for _, v := range g.Scrape {
		tg, err := source.ParseTarget(v)
		if err != nil {
			return src, UsageError(err)
		}
		src.Scrape[tg.Name] = tg.URL
	}
	return src, nil
}

// cutoverError maps a cutover's end to the exit codes of the contract.
func cutoverError(err error) error {
	var ne *migrate.NotEmptyError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, migrate.ErrPaused):
		return &ExitError{Code: ExitPaused, Err: err}
	case errors.Is(err, migrate.ErrInconclusive):
		return &ExitError{Code: ExitUnknown, Err: err}
	case errors.Is(err, migrate.ErrRolledBack), errors.Is(err, migrate.ErrRefused):
		return Refused(err)
	case errors.As(err, &ne) && errors.Is(err, context.DeadlineExceeded):
		return TimedOut(fmt.Errorf("drain %v: the cutover stays Draining; cutover apply resumes it", err))
	}
	return err
}

// eventPrinter prints a cutover's events: lines, or JSON lines; and,
// with --log, JSON lines to a file as well.
type eventPrinter struct {
	p      *output.Printer
	stream *output.Stream
	out    io.Writer
	log    *os.File
	err    error
}

func newEventPrinter(p *output.Printer, out io.Writer, logFile string) (*eventPrinter, error) {
	ep := &eventPrinter{p: p, stream: p.Stream(), out: out}
	if logFile != "" {
		f, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return nil, fmt.Errorf("--log: %w", err)
		}
		ep.log = f
	}
	return ep, nil
}

func (ep *eventPrinter) print(e migrate.CutoverEvent) {
	if ep.log != nil {
		if b, err := json.Marshal(e); err == nil {
			_, _ = ep.log.Write(append(b, '\n'))
		}
	}
	if ep.err != nil {
		return
	}
	if ep.p.Format.Machine() {
		ep.err = ep.stream.Emit(e)
		return
	}
	line := e.Line()
	switch e.Event {
	case migrate.CutoverRolledBack, migrate.CutoverFailed:
		line = ep.p.Colors.Bad(line)
	case migrate.CutoverPaused, migrate.CutoverInconclusive:
		line = ep.p.Colors.Warn(line)
	case migrate.CutoverDone:
		line = ep.p.Colors.Good(line)
	case migrate.CutoverGate:
		if e.Gate.Phase != migrate.Successful {
			line = ep.p.Colors.Warn(line)
		}
	}
	_, ep.err = fmt.Fprintln(ep.out, line)
}

func (ep *eventPrinter) close() {
	if ep.log != nil {
		ep.log.Close()
	}
}

// CutoverPlanOptions prints a plan.
type CutoverPlanOptions struct {
	f       *shardsFlags
	pf      planFlags
	out     string
	printer *output.Printer
	c       *registry.Client
}

func newCmdCutoverPlan(f *shardsFlags) *cobra.Command {
	o := &CutoverPlanOptions{f: f}
	cmd := &cobra.Command{
		Use:   "plan --from POOL --to POOL",
		Short: "Print every step of a cutover, its gates with their resolved queries, and what it would change",
		Example: `  shardctl cutover plan --from blue --to green
  shardctl cutover plan --from blue --to green --steps 10,50,100 --gates gates.yaml --out plan.json`,
		Args: cobra.NoArgs,
		RunE: runOptions(o),
	}
	o.pf.add(cmd)
	cmd.Flags().StringVar(&o.out, "out", "", "save the plan (JSON, with a fingerprint of the registry) for cutover apply --plan")
	return cmd
}

func (o *CutoverPlanOptions) Complete(*cobra.Command, []string) (err error) {
	if o.printer, err = o.f.g.Printer(); err != nil {
		return err
	}
	if o.c, err = o.f.client(); err != nil {
		return err
	}
	return o.pf.complete(o.f.app)
}

func (o *CutoverPlanOptions) Validate() error {
	if o.pf.opts.From == "" || o.pf.opts.To == "" {
		return fmt.Errorf("--from and --to are required")
	}
	return nil
}

func (o *CutoverPlanOptions) Run(ctx context.Context) error {
	plan, err := migrate.MakePlan(ctx, o.c, o.pf.opts)
	if err != nil {
		return err
	}
	if o.out != "" {
		b, err := json.MarshalIndent(plan, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(o.out, append(b, '\n'), 0o644); err != nil {
			return fmt.Errorf("--out: %w", err)
		}
	}
	if o.printer.Format.Machine() {
		return o.printer.Print(plan)
	}
	w := o.f.g.Streams.Out
	fmt.Fprintf(w, "cutover %s of %s: from %s (%s) to %s (%s)\n", plan.Name, plan.App, plan.From, shardIDs(plan.FromShards), plan.To, shardIDs(plan.ToShards))
	for i, a := range plan.Actions {
		fmt.Fprintf(w, "  %d. %s\n", i+1, a)
	}
	fmt.Fprintln(w, "gates:")
	for _, g := range plan.Gates {
		fmt.Fprintf(w, "  %s: %s, every %v", g.Name, plan.Queries[g.Name], time.Duration(g.Interval))
		if g.SuccessCondition != "" {
			fmt.Fprintf(w, ", success when %s", g.SuccessCondition)
		}
		if g.FailureCondition != "" {
			fmt.Fprintf(w, ", failure when %s", g.FailureCondition)
		}
		fmt.Fprintf(w, ", no data: %s\n", g.NoData)
	}
	fmt.Fprintf(w, "fingerprint %s; changes: %v\n", plan.Fingerprint, plan.Changes)
	if o.out != "" {
		fmt.Fprintf(w, "saved to %s: cutover apply --plan %s\n", o.out, o.out)
	}
	return nil
}

func shardIDs(ss []migrate.ShardState) string {
	var ids []string
	for _, s := range ss {
		ids = append(ids, s.ID)
	}
	return strings.Join(ids, ", ")
}

// runnerFlags are the flags of the commands that run a cutover.
type runnerFlags struct {
	logFile    string
	poll       time.Duration
	stuckAfter int
	leaseTTL   time.Duration
}

func (rf *runnerFlags) add(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&rf.logFile, "log", "", "append every step as a JSON line to this file too (an audit trail)")
	f.DurationVar(&rf.poll, "poll", migrate.DefaultPoll, "how often the drain reads each shard")
	f.IntVar(&rf.stuckAfter, "stuck-after", migrate.DefaultStuckAfter, "polls without progress before the drain says what blocks a shard")
	f.DurationVar(&rf.leaseTTL, "lease-ttl", migrate.DefaultLeaseTTL, "how long the cutover's lease outlives a process that stops renewing it")
}

// runner builds a Runner whose events go to printer (and the log).
func (rf *runnerFlags) runner(f *shardsFlags, c *registry.Client, printer *output.Printer) (*migrate.Runner, *eventPrinter, error) {
	src, err := cutoverSources(f.g)
	if err != nil {
		return nil, nil, err
	}
	reader, err := backlogReader(f.g)
	if err != nil {
		return nil, nil, err
	}
	ep, err := newEventPrinter(printer, f.g.Streams.Out, rf.logFile)
	if err != nil {
		return nil, nil, err
	}
	return &migrate.Runner{Registry: c, Sources: src, Backlog: reader, LeaseTTL: rf.leaseTTL, Poll: rf.poll,
		StuckAfter: rf.stuckAfter, OnEvent: ep.print}, ep, nil
}

// CutoverApplyOptions runs a cutover.
type CutoverApplyOptions struct {
	f        *shardsFlags
	pf       planFlags
	rf       runnerFlags
	planFile string
	yes      bool
	printer  *output.Printer
	c        *registry.Client
}

func newCmdCutoverApply(f *shardsFlags) *cobra.Command {
	o := &CutoverApplyOptions{f: f}
	cmd := &cobra.Command{
		Use:   "apply (--from POOL --to POOL | --plan FILE)",
		Short: "Run a cutover: preflight, weights step by step under the gates, drain the old pool; resume one in progress",
		Example: `  shardctl cutover apply --from blue --to green --yes
  shardctl cutover apply --plan plan.json --yes --log cutover.jsonl
  shardctl cutover apply --from blue --to green --pause-before promote --yes -o json`,
		Args: cobra.NoArgs,
		RunE: runOptions(o),
	}
	o.pf.add(cmd)
	o.rf.add(cmd)
	cmd.Flags().StringVar(&o.planFile, "plan", "", "run a plan saved by cutover plan --out (refused if the registry moved on since)")
	cmd.Flags().BoolVar(&o.yes, "yes", false, "do not ask; required without a terminal")
	return cmd
}

func (o *CutoverApplyOptions) Complete(*cobra.Command, []string) (err error) {
	if o.printer, err = o.f.g.Printer(); err != nil {
		return err
	}
	if o.c, err = o.f.client(); err != nil {
		return err
	}
	return o.pf.complete(o.f.app)
}

func (o *CutoverApplyOptions) Validate() error {
	switch {
	case o.planFile != "" && (o.pf.opts.From != "" || o.pf.opts.To != ""):
		return fmt.Errorf("--plan and --from/--to both given: the plan names its pools")
	case o.planFile == "" && (o.pf.opts.From == "" || o.pf.opts.To == ""):
		return fmt.Errorf("give --from and --to, or --plan FILE")
	}
	return nil
}

func (o *CutoverApplyOptions) Run(ctx context.Context) error {
	var plan migrate.Plan
	var err error
	if o.planFile != "" {
		saved, err := migrate.ReadPlan(o.planFile)
		if err != nil {
			return err
		}
		if plan, err = migrate.MakePlan(ctx, o.c, saved.Options()); err != nil {
			return err
		}
		if drift := migrate.Drift(saved, plan); drift != "" {
			return Refused(fmt.Errorf("plan %s was made from another registry state (fingerprint %s, now %s): %s; make a new plan", o.planFile, saved.Fingerprint, plan.Fingerprint, drift))
		}
	} else if plan, err = migrate.MakePlan(ctx, o.c, o.pf.opts); err != nil {
		return err
	}
	if !plan.Changes {
		fmt.Fprintln(o.f.g.Streams.ErrOut, plan.Actions[0])
		return nil
	}
	if !o.yes {
		if err := confirm(o.f.g, plan); err != nil {
			return err
		}
	}
	r, ep, err := o.rf.runner(o.f, o.c, o.printer)
	if err != nil {
		return err
	}
	defer ep.close()
	_, err = r.Apply(ctx, plan)
	if err == nil {
		err = ep.err
	}
	return cutoverError(err)
}

// confirm asks at a terminal; without one, --yes is required.
func confirm(g *Globals, plan migrate.Plan) error {
	if !isTerminal(g.Streams.In) {
		return Usagef("cutover apply changes where new work goes: give --yes to run it without a terminal")
	}
	fmt.Fprintf(g.Streams.Out, "cutover %s will:\n", plan.Name)
	for i, a := range plan.Actions {
		fmt.Fprintf(g.Streams.Out, "  %d. %s\n", i+1, a)
	}
	fmt.Fprint(g.Streams.Out, "apply it? [y/N] ")
	answer, _ := bufio.NewReader(g.Streams.In).ReadString('\n')
	if a := strings.ToLower(strings.TrimSpace(answer)); a != "y" && a != "yes" {
		return errors.New("not applied")
	}
	return nil
}

// CutoverStatusOptions prints a cutover's state, or waits for one.
type CutoverStatusOptions struct {
	f       *shardsFlags
	name    string
	watch   bool
	waitFor string
	timeout time.Duration
	printer *output.Printer
	c       *registry.Client
}

func newCmdCutoverStatus(f *shardsFlags) *cobra.Command {
	o := &CutoverStatusOptions{f: f}
	cmd := &cobra.Command{
		Use:   "status [NAME]",
		Short: "Print a cutover's phase, step, weights, gates and drain; or wait for it to pause, promote or finish",
		Long: `Print the cutover NAME (default: the one in progress, else the last one): its
phase, the step it is at, the pool weights, each gate's last measurement and
each draining shard's backlog.

--wait-for paused|promoted|done waits (at most --timeout) and exits 0 once it is
reached, 3 if the cutover failed or rolled back, 4 at the timeout while it still
progresses, 5 if it paused for cutover promote, 6 if it paused inconclusive.
Without --wait-for the exit code says where it is: 0 progressing or done, 3
failed or rolled back, 5 paused, 6 inconclusive.`,
		Example: `  shardctl cutover status
  shardctl cutover status blue-to-green --wait-for done --timeout 1h
  shardctl cutover status --watch -o json`,
		Args: cobra.MaximumNArgs(1),
		RunE: runOptions(o),
	}
	cmd.Flags().BoolVar(&o.watch, "watch", false, "print again on every change (JSON lines with -o json)")
	cmd.Flags().StringVar(&o.waitFor, "wait-for", "", "wait until the cutover is paused, promoted or done")
	cmd.Flags().DurationVar(&o.timeout, "timeout", 30*time.Minute, "with --wait-for or --watch: how long to wait")
	_ = cmd.RegisterFlagCompletionFunc("wait-for", completions.Values("paused", "promoted", "done"))
	return cmd
}

func (o *CutoverStatusOptions) Complete(_ *cobra.Command, args []string) (err error) {
	if len(args) > 0 {
		o.name = args[0]
	}
	if o.printer, err = o.f.g.Printer(); err != nil {
		return err
	}
	o.c, err = o.f.client()
	return err
}

func (o *CutoverStatusOptions) Validate() error {
	switch o.waitFor {
	case "", "paused", "promoted", "done":
	default:
		return fmt.Errorf("--wait-for %q: want paused, promoted or done", o.waitFor)
	}
	if o.timeout <= 0 {
		return fmt.Errorf("--timeout must be positive")
	}
	return nil
}

// cutoverStatus is what status prints.
type cutoverStatus struct {
	registry.Cutover
	StepName string           `json:"stepName"`
	Steps    int              `json:"steps"`
	Progress migrate.Progress `json:"progress"`
}

func (o *CutoverStatusOptions) read(ctx context.Context) (cutoverStatus, error) {
	var rec registry.Cutover
	var err error
	if o.name != "" {
		rec, err = o.c.Cutover(ctx, o.name)
	} else {
		rec, err = migrate.Current(ctx, o.c, o.f.app)
	}
	if err != nil {
		return cutoverStatus{}, err
	}
	st := cutoverStatus{Cutover: rec, Progress: migrate.ProgressOf(rec)}
	st.Spec, st.Status = nil, nil
	if plan, err := migrate.PlanOf(rec); err == nil {
		st.Steps = plan.Total()
		st.StepName = plan.StepName(min(rec.Step, plan.Total()-1))
	}
	return st, nil
}

// reached says whether a status answers --wait-for, and the exit error
// when it never will.
func (o *CutoverStatusOptions) reached(st cutoverStatus) (bool, error) {
	switch st.Phase {
	case registry.PhaseRolledBack, registry.PhaseFailed:
		return false, Refused(fmt.Errorf("cutover %s %s: %s", st.Name, st.Phase, st.Message))
	case registry.PhasePaused:
		if st.Progress.Inconclusive != "" {
			return false, &ExitError{Code: ExitUnknown, Err: fmt.Errorf("cutover %s paused, inconclusive: %s", st.Name, st.Progress.Inconclusive)}
		}
		if o.waitFor == "paused" {
			return true, nil
		}
		return false, &ExitError{Code: ExitPaused, Err: fmt.Errorf("cutover %s %s", st.Name, st.Message)}
	case registry.PhaseDone:
		return true, nil
	}
	switch o.waitFor {
	case "":
		return true, nil
	case "promoted":
		return st.Steps > 0 && st.Step >= st.Steps-2, nil // the last weight step is complete
	}
	return false, nil
}

func (o *CutoverStatusOptions) Run(ctx context.Context) error {
	stream := o.printer.Stream()
	show := func(st cutoverStatus) error {
		if o.printer.Format.Machine() {
			if o.watch {
				return stream.Emit(st)
			}
			return o.printer.Print(st)
		}
		o.describe(st)
		return nil
	}
	st, err := o.read(ctx)
	if err != nil {
		return err
	}
	if err := show(st); err != nil {
		return err
	}
	if o.waitFor == "" && !o.watch {
		_, err := o.reached(st)
		return err
	}
	deadline := time.After(o.timeout)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	last := st.Version
	for {
		if o.waitFor != "" {
			ok, err := o.reached(st)
			if ok || err != nil {
				return err
			}
		} else if registry.Final(st.Phase) {
			_, err := o.reached(st)
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline:
			return TimedOut(fmt.Errorf("cutover %s still %s at step %d of %d (%s) after %v", st.Name, st.Phase, st.Step+1, st.Steps, st.StepName, o.timeout))
		case <-tick.C:
		}
		if st, err = o.read(ctx); err != nil {
			return err
		}
		if o.watch && st.Version != last {
			last = st.Version
			if err := show(st); err != nil {
				return err
			}
		}
	}
}

// describe prints a status for a person.
func (o *CutoverStatusOptions) describe(st cutoverStatus) {
	w, c := o.f.g.Streams.Out, o.printer.Colors
	phase := st.Phase
	switch st.Phase {
	case registry.PhaseRolledBack, registry.PhaseFailed:
		phase = c.Bad(phase)
	case registry.PhasePaused:
		phase = c.Warn(phase)
	case registry.PhaseDone:
		phase = c.Good(phase)
	}
	fmt.Fprintf(w, "cutover %s (%s): %s → %s, %s, step %d of %d: %s\n", st.Name, st.App, st.From, st.To, phase, min(st.Step+1, st.Steps), st.Steps, st.StepName)
	fmt.Fprintf(w, "  weights: %s\n", human.Weights(st.Weights))
	if st.Message != "" {
		fmt.Fprintf(w, "  %s\n", st.Message)
	}
	if st.Holder != "" && st.LeaseExpires != nil {
		fmt.Fprintf(w, "  run by %s (lease until %s)\n", st.Holder, st.LeaseExpires.Local().Format(time.TimeOnly))
	}
	for _, name := range slices.Sorted(maps.Keys(st.Progress.Gates)) {
		m := st.Progress.Gates[name]
		fmt.Fprintf(w, "  gate %s: %s = %v: %s %s\n", name, m.Query, m.Result, m.Phase, m.Message)
	}
	for _, id := range slices.Sorted(maps.Keys(st.Progress.Drain)) {
		e := st.Progress.Drain[id]
		fmt.Fprintf(w, "  %s\n", e.Line())
	}
}

// namedCutover is what promote and rollback share: the cutover they act
// on (the app's current one unless named) and a runner to act with.
type namedCutover struct {
	f       *shardsFlags
	rf      runnerFlags
	name    string
	printer *output.Printer
	c       *registry.Client
}

func (n *namedCutover) Complete(_ *cobra.Command, args []string) (err error) {
	if len(args) > 0 {
		n.name = args[0]
	}
	if n.printer, err = n.f.g.Printer(); err != nil {
		return err
	}
	n.c, err = n.f.client()
	return err
}

func (n *namedCutover) Validate() error { return nil }

// runner resolves the cutover's name and starts a runner; the caller
// closes the event printer it returns.
func (n *namedCutover) runner(ctx context.Context) (string, *migrate.Runner, *eventPrinter, error) {
	name := n.name
	if name == "" {
		rec, err := migrate.Current(ctx, n.c, n.f.app)
		if err != nil {
			return "", nil, nil, err
		}
		name = rec.Name
	}
	r, ep, err := n.rf.runner(n.f, n.c, n.printer)
	return name, r, ep, err
}

// CutoverPromoteOptions lets a paused cutover go on.
type CutoverPromoteOptions struct{ namedCutover }

func newCmdCutoverPromote(f *shardsFlags) *cobra.Command {
	o := &CutoverPromoteOptions{namedCutover{f: f}}
	cmd := &cobra.Command{
		Use:     "promote [NAME]",
		Short:   "Let a paused cutover go on, and run it to its end (a done one: nothing to do)",
		Example: `  shardctl cutover promote blue-to-green`,
		Args:    cobra.MaximumNArgs(1),
		RunE:    runOptions(o),
	}
	o.rf.add(cmd)
	return cmd
}

func (o *CutoverPromoteOptions) Run(ctx context.Context) error {
	name, r, ep, err := o.runner(ctx)
	if err != nil {
		return err
	}
	defer ep.close()
	_, err = r.Promote(ctx, name)
	return cutoverError(err)
}

// CutoverRollbackOptions sends new work back to the old pool.
type CutoverRollbackOptions struct {
	namedCutover
	drainTarget  bool
	drainTimeout time.Duration
}

func newCmdCutoverRollback(f *shardsFlags) *cobra.Command {
	o := &CutoverRollbackOptions{namedCutover: namedCutover{f: f}}
	cmd := &cobra.Command{
		Use:   "rollback [NAME]",
		Short: "Send new work back to the old pool at once and undrain it; --drain-target drains the new pool",
		Long: `Set the weights back to the old pool at once (a running apply stops), set the
old pool's DRAINING or OUT_OF_SERVICE shards UP again, and mark the cutover
RolledBack. The new pool keeps and finishes the instances it took; with
--drain-target it is drained as drain --wait does. Running it twice changes
nothing more.`,
		Example: `  shardctl cutover rollback
  shardctl cutover rollback blue-to-green --drain-target`,
		Args: cobra.MaximumNArgs(1),
		RunE: runOptions(o),
	}
	o.rf.add(cmd)
	cmd.Flags().BoolVar(&o.drainTarget, "drain-target", false, "drain the new pool too, until it holds nothing")
	cmd.Flags().DurationVar(&o.drainTimeout, "drain-timeout", migrate.DefaultDrainTimeout, "with --drain-target: how long the new pool may take to empty (exit 4)")
	return cmd
}

func (o *CutoverRollbackOptions) Run(ctx context.Context) error {
	name, r, ep, err := o.runner(ctx)
	if err != nil {
		return err
	}
	defer ep.close()
	_, err = r.Rollback(ctx, name, o.drainTarget, o.drainTimeout)
	var ne *migrate.NotEmptyError
	if errors.As(err, &ne) && errors.Is(err, context.DeadlineExceeded) {
		return TimedOut(fmt.Errorf("drain of the new pool %v", err))
	}
	return err
}
