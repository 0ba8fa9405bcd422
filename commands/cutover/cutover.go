package cutover

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
	"github.com/spf13/pflag"

	"github.com/shardctl/shardctl/commands/cmdutil"
	"github.com/shardctl/shardctl/commands/output"
	"github.com/shardctl/shardctl/completions"
	"github.com/shardctl/shardctl/internal/human"
	"github.com/shardctl/shardctl/internal/registry/registryapi"
	"github.com/shardctl/shardctl/internal/registry/registryclient"
	"github.com/shardctl/shardctl/internal/signals"
	"github.com/shardctl/shardctl/internal/source"
	"github.com/shardctl/shardctl/migrate"
	"github.com/shardctl/shardctl/migrate/drain"
	"github.com/shardctl/shardctl/migrate/kube"
)

// NewCmdCutover builds `shardctl cutover`.
func NewCmdCutover(g *cmdutil.Globals) *cobra.Command {
	f := &cmdutil.RegistryFlags{Globals: g}
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

--mode k8s adds a clients step after the preflight, in the namespace and
cluster the kubectl flags name: --service's selector is switched to the pods
--selector picks (the proxy's; refused unless one of them is ready in an
EndpointSlice), the endpoint in --configmap or --secret (--key) is set to
--value, the --restart workloads are restarted as kubectl rollout restart does
and waited for as kubectl rollout status does. What it replaced is recorded on
each object (shardctl.io/previous-selector, shardctl.io/previous-values), so
rollback restores it exactly; a Lease, shardctl-cutover-NAME, locks the
cutover and records its restarts. --dry-run=client|server prints the exact
patches (server: as the API server answers them) and changes nothing.

A gates file (--gates) lists gates, each measured every interval while a
step holds, as an Argo Rollouts analysis is: a PromQL query (needs
--prometheus; {{.To}} and {{.From}} are the pools' shard ids as a regular
expression, {{.ToPool}} and {{.FromPool}} their names) or a signal of a
pool's shards (level, ratio, completedPerSec, p99Seconds, queue,
queueSlopePerSec, dropShare, debtInstances…; pool to or from), judged by
successCondition or failureCondition on result (the values, result[0]
first), tolerating failureLimit failed and consecutiveErrorLimit erroring
measurements, count of them a step (0: every interval), and noData: fail
(the default), inconclusive (pause) or pass:

  gates:
  - name: green-completes
    signal: ratio
    successCondition: result[0] >= 0.8
    interval: 30s
    failureLimit: 1
  - name: green-backpressure
    query: sum(rate(zeebe_dropped_request_count_total{cluster=~"{{.To}}"}[1m]))
    failureCondition: result[0] > 5

Exit codes: 0 done (or reached what --wait-for asks), 1 error (RBAC denied,
unreachable), 2 usage, 3 a gate failed and the cutover rolled back (or a
preflight, a lease, a plan or a switch to no ready pod refused), 4 timed out
(the drain or a rollout; the cutover stays where it is and apply resumes it),
5 paused waiting for cutover promote, 6 inconclusive (a gate without data under
noData: inconclusive).`,
		Example: `  # plan, review, run: pause before the last step, promote when ready
  shardctl cutover plan --from blue --to green --steps 10,50,100 --step-pause 10m --out plan.json
  shardctl cutover apply --plan plan.json --pause-before promote --yes --log cutover.jsonl
  shardctl cutover status --wait-for paused --timeout 1h
  shardctl cutover promote --yes

  # something is wrong: new work back to blue at once
  shardctl cutover rollback --yes`,
		GroupID: cmdutil.GroupOperate,
		Args:    cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return cmdutil.Usagef("missing subcommand: use plan, apply, status, promote or rollback")
		},
	}
	f.AddFlags(cmd.PersistentFlags())
	cmd.AddCommand(newCmdCutoverPlan(f), newCmdCutoverApply(f), newCmdCutoverStatus(f), newCmdCutoverPromote(f), newCmdCutoverRollback(f))
	return cmd
}

// planFlags are the flags that make a plan (plan and apply).
type planFlags struct {
	opts      migrate.PlanOptions
	steps     string
	gatesFile string
	mode      string
	kube      kube.Spec
	selector  string
	restart   []string
	timeout   time.Duration
	// names are the flags' names, to tell which a command line gave.
	names []string
}

func (pf *planFlags) add(cmd *cobra.Command) {
	f := pflag.NewFlagSet("plan", pflag.ContinueOnError)
	defer func() {
		f.VisitAll(func(fl *pflag.Flag) { pf.names = append(pf.names, fl.Name) })
		cmd.Flags().AddFlagSet(f)
	}()
	f.StringVar(&pf.opts.From, "from", "", "the pool new work leaves (blue)")
	f.StringVar(&pf.opts.To, "to", "", "the pool new work moves to (green)")
	f.StringVar(&pf.opts.Name, "name", "", "name of the cutover (default FROM-to-TO)")
	f.StringVar(&pf.steps, "steps", "10,50,100", "percentages of new instances the target pool gets, step by step")
	f.DurationVar(&pf.opts.StepPause, "step-pause", migrate.DefaultStepPause, "how long each step holds while the gates watch")
	f.StringVar(&pf.gatesFile, "gates", "", "YAML file of gates (see the gates file above); default: the target pool's signals not critical")
	f.DurationVar(&pf.opts.GateWindow, "gate-window", migrate.DefaultGateWindow, "how far back the preflight and signal gates read")
	f.DurationVar(&pf.opts.DrainTimeout, "drain-timeout", migrate.DefaultDrainTimeout, "how long the old pool may take to empty (exit 4 after; apply resumes)")
	f.StringVar(&pf.opts.PauseBefore, "pause-before", "", "pause for cutover promote before: promote (the last weight step) or drain")
	f.StringVar(&pf.mode, "mode", modeRegistry, "registry: the pools' weights in the registry; k8s: also move the clients in Kubernetes once green is ready (the kubectl flags say where)")
	f.StringVar(&pf.kube.Service, "service", "", "k8s: the Service clients use; its selector is switched to --selector")
	f.StringVar(&pf.selector, "selector", "", "k8s: the labels of the pods --service selects once switched (the proxy's), key=value[,key=value]")
	f.StringVar(&pf.kube.ConfigMap, "configmap", "", "k8s: the ConfigMap holding the endpoint workloads read (--key)")
	f.StringVar(&pf.kube.Secret, "secret", "", "k8s: the Secret holding the endpoint workloads read (--key), instead of a ConfigMap")
	f.StringVar(&pf.kube.Key, "key", "", "k8s: the key of --configmap or --secret holding the endpoint, e.g. ZEEBE_ADDRESS")
	f.StringVar(&pf.kube.Value, "value", "", "k8s: the endpoint --key is set to, e.g. shardctl-proxy:26500")
	f.StringSliceVar(&pf.restart, "restart", nil, "k8s: workloads restarted after the rewrite, as kubectl rollout restart does, e.g. deploy/workers,sts/starter")
	f.DurationVar(&pf.timeout, "rollout-timeout", migrate.DefaultRolloutTimeout, "k8s: how long each restarted workload may take to roll out (exit 4 after; apply resumes)")
}

// completions of the plan flags; registered once the flags are on cmd.
func (pf *planFlags) completions(cmd *cobra.Command) {
	_ = cmd.RegisterFlagCompletionFunc("pause-before", completions.Values(migrate.PausePromote, migrate.PauseDrain))
	_ = cmd.RegisterFlagCompletionFunc("mode", completions.Values(modeRegistry, modeK8s))
}

// given are the plan flags the command line set.
func (pf *planFlags) given(flags *pflag.FlagSet) []string {
	var out []string
	for _, name := range pf.names {
		if flags.Changed(name) {
			out = append(out, name)
		}
	}
	return out
}

// planOptionFlags are the flags that set each option of a plan, by the
// name migrate.Plan.Differences gives the option.
var planOptionFlags = map[string][]string{
	"steps":               {"steps"},
	"stepPause":           {"step-pause"},
	"gateWindow":          {"gate-window"},
	"drainTimeout":        {"drain-timeout"},
	"pauseBefore":         {"pause-before"},
	"gates":               {"gates"},
	"kube":                {"mode"},
	"kube.service":        {"service"},
	"kube.selector":       {"selector"},
	"kube.configMap":      {"configmap"},
	"kube.secret":         {"secret"},
	"kube.key":            {"key"},
	"kube.value":          {"value"},
	"kube.restart":        {"restart"},
	"kube.rolloutTimeout": {"rollout-timeout"},
}

// overridesOfAPlan are the flags apply --plan takes: they change how the
// saved plan runs (where it pauses, how long the drain may take), not
// what was reviewed (its pools, steps, gates and clients step).
var overridesOfAPlan = []string{"pause-before", "drain-timeout"}

// Cutover modes.
const (
	modeRegistry = "registry"
	modeK8s      = "k8s"
)

// complete reads the flags into plan options (usage errors exit 2, a bad
// gates file 1).
func (pf *planFlags) complete(g *cmdutil.Globals, app string) error {
	pf.opts.App = app
	switch pf.mode {
	case modeRegistry:
		if pf.kube.Service != "" || pf.kube.ConfigMap != "" || pf.kube.Secret != "" || len(pf.restart) > 0 {
			return cmdutil.Usagef("--service, --configmap, --secret and --restart move clients in Kubernetes: give --mode k8s")
		}
	case modeK8s:
		spec := pf.kube
		sel, err := kube.ParseSelector(pf.selector)
		if err != nil {
			return cmdutil.UsageError(err)
		}
		spec.Selector, spec.Restart, spec.RolloutTimeout = sel, pf.restart, signals.Duration(pf.timeout)
		if spec.Namespace, _, err = g.Kube.ToRawKubeConfigLoader().Namespace(); err != nil {
			return fmt.Errorf("kubeconfig: %w", err)
		}
		if err := spec.Validate(); err != nil {
			return cmdutil.UsageError(err)
		}
		pf.opts.Kube = &spec
	default:
		return cmdutil.Usagef("--mode %q: want registry or k8s", pf.mode)
	}
	pf.opts.Steps = nil
	for _, v := range strings.Split(pf.steps, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil {
			return cmdutil.Usagef("--steps %q: want percentages such as 10,50,100", pf.steps)
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

// validate checks the options as apply will: a plan that apply would
// refuse for its command line is refused when it is made.
func (pf *planFlags) validate(g *cmdutil.Globals) error {
	if err := pf.opts.Validate(); err != nil {
		return cmdutil.UsageError(err)
	}
	src, err := cutoverSources(g)
	if err != nil {
		return err
	}
	gates := pf.opts.Gates
	if len(gates) == 0 {
		gates = migrate.DefaultGates()
	}
	if err := migrate.CheckSources(gates, src); err != nil {
		return cmdutil.UsageError(err)
	}
	return nil
}

// sources are where a cutover reads signals and gates: the global flags.
func cutoverSources(g *cmdutil.Globals) (migrate.Sources, error) {
	src := migrate.Sources{Prometheus: g.PrometheusURL(), Scrape: map[string]string{}}
	if src.Prometheus != "" && len(g.Scrape) > 0 {
		return src, cmdutil.Usagef("--prometheus and --scrape both given: pick one source")
	}
	for _, v := range g.Scrape {
		tg, err := source.ParseTarget(v)
		if err != nil {
			return src, cmdutil.UsageError(err)
		}
		src.Scrape[tg.Name] = tg.URL
	}
	return src, nil
}

// cutoverError maps a cutover's end to the exit codes of the contract.
func cutoverError(err error) error {
	var ne *drain.NotEmptyError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, migrate.ErrPaused):
		return &cmdutil.ExitError{Code: cmdutil.ExitPaused, Err: err}
	case errors.Is(err, migrate.ErrInconclusive):
		return &cmdutil.ExitError{Code: cmdutil.ExitUnknown, Err: err}
	case errors.Is(err, migrate.ErrRolledBack), errors.Is(err, migrate.ErrRefused):
		return cmdutil.Refused(err)
	case errors.As(err, &ne) && errors.Is(err, context.DeadlineExceeded):
		return cmdutil.TimedOut(fmt.Errorf("drain %v: the cutover stays Draining; cutover apply resumes it", err))
	case errors.Is(err, kube.ErrRolloutTimeout):
		return cmdutil.TimedOut(fmt.Errorf("%v: the cutover stays at its clients step; cutover apply resumes it (waiting, not restarting again)", err))
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
	// A person follows a cutover by the clock: every line says when.
	line := e.At.Local().Format(time.TimeOnly) + " " + e.Line()
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
	f       *cmdutil.RegistryFlags
	pf      planFlags
	out     string
	printer *output.Printer
	c       *registryclient.Client
}

func newCmdCutoverPlan(f *cmdutil.RegistryFlags) *cobra.Command {
	o := &CutoverPlanOptions{f: f}
	cmd := &cobra.Command{
		Use:   "plan --from POOL --to POOL",
		Short: "Print every step of a cutover, its gates with their resolved queries, and what it would change",
		Example: `  shardctl cutover plan --from blue --to green
  shardctl cutover plan --from blue --to green --steps 10,50,100 --gates gates.yaml --out plan.json`,
		Args: cobra.NoArgs,
		RunE: cmdutil.RunOptions(o),
	}
	o.pf.add(cmd)
	o.pf.completions(cmd)
	cmd.Flags().StringVar(&o.out, "out", "", "save the plan (JSON, with a fingerprint of the registry) for cutover apply --plan")
	return cmd
}

func (o *CutoverPlanOptions) Complete(*cobra.Command, []string) (err error) {
	if o.printer, err = o.f.Globals.Printer(); err != nil {
		return err
	}
	if o.c, err = o.f.Client(); err != nil {
		return err
	}
	return o.pf.complete(o.f.Globals, o.f.App)
}

func (o *CutoverPlanOptions) Validate() error {
	if o.pf.opts.From == "" || o.pf.opts.To == "" {
		return fmt.Errorf("--from and --to are required")
	}
	return o.pf.validate(o.f.Globals)
}

func (o *CutoverPlanOptions) Run(ctx context.Context) error {
	plan, err := migrate.MakePlan(ctx, o.c, o.pf.opts)
	if err != nil {
		return err
	}
	// The Kubernetes writes as apply would make them now, read from the
	// objects as they are (a refusal is apply's: exit 3).
	changes, err := clientChanges(ctx, o.f.Globals, plan, kube.DryRunClient, false)
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
		if plan.Kube != nil {
			return o.printer.Print(plannedChanges{Plan: plan, Patches: changes})
		}
		return o.printer.Print(plan)
	}
	w := o.f.Globals.Streams.Out
	printPlan(w, plan)
	printChanges(w, changes, kube.DryRunClient)
	if o.out != "" {
		fmt.Fprintf(w, "saved to %s: cutover apply --plan %s\n", o.out, o.out)
	}
	return nil
}

// plannedChanges is a plan with its Kubernetes writes, as -o json prints
// them for plan and apply --dry-run.
type plannedChanges struct {
	migrate.Plan
	DryRun  kube.DryRun   `json:"dryRun,omitempty"`
	Patches []kube.Change `json:"patches"`
}

// clientChanges are the Kubernetes writes of plan's clients step (restore:
// of its rollback), as dry says; none without a clients step.
func clientChanges(ctx context.Context, g *cmdutil.Globals, plan migrate.Plan, dry kube.DryRun, restore bool) ([]kube.Change, error) {
	if plan.Kube == nil {
		return nil, nil
	}
	kc, err := kube.New(g.Kube)
	if err != nil {
		return nil, err
	}
	changes, err := (&migrate.Runner{Kube: kc}).ClientChanges(ctx, plan, dry, restore)
	if errors.Is(err, kube.ErrRefused) {
		return changes, cmdutil.Refused(err)
	}
	return changes, err
}

// printChanges prints Kubernetes writes with their exact patches.
func printChanges(w io.Writer, changes []kube.Change, dry kube.DryRun) {
	if len(changes) == 0 {
		return
	}
	fmt.Fprintf(w, "kubernetes (%s):\n", map[kube.DryRun]string{kube.DryRunClient: "patches as they would be sent", kube.DryRunServer: "the API server's dry-run answers, nothing stored"}[dry])
	for _, ch := range changes {
		fmt.Fprintf(w, "  %s\n", ch.Line())
		if len(ch.Patch) > 0 {
			fmt.Fprintf(w, "    %s patch: %s\n", ch.PatchType, ch.Patch)
		}
		if len(ch.Server) > 0 {
			fmt.Fprintf(w, "    server: %s\n", ch.Server)
		}
	}
}

// printPlan prints a plan's steps and gates for a person.
func printPlan(w io.Writer, plan migrate.Plan) {
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
	// shards is how the preflight and the drain reach the shards.
	shards cmdutil.ShardAccessFlags
}

func (rf *runnerFlags) add(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&rf.logFile, "log", "", "append every step as a JSON line to this file too (an audit trail)")
	f.DurationVar(&rf.poll, "poll", drain.DefaultPoll, "how often the drain reads each shard")
	f.IntVar(&rf.stuckAfter, "stuck-after", drain.DefaultStuckAfter, "polls without progress before the drain says what blocks a shard")
	f.DurationVar(&rf.leaseTTL, "lease-ttl", migrate.DefaultLeaseTTL, "how long the cutover's lease outlives a process that stops renewing it")
	rf.shards.AddFlags(f)
}

// runner builds a Runner whose events go to printer (and the log).
func (rf *runnerFlags) runner(f *cmdutil.RegistryFlags, c *registryclient.Client, printer *output.Printer) (*migrate.Runner, *eventPrinter, error) {
	src, err := cutoverSources(f.Globals)
	if err != nil {
		return nil, nil, err
	}
	reader, err := cmdutil.BacklogReader(f.Globals)
	if err != nil {
		return nil, nil, err
	}
	shards, err := rf.shards.Access(nil)
	if err != nil {
		return nil, nil, err
	}
	ep, err := newEventPrinter(printer, f.Globals.Streams.Out, rf.logFile)
	if err != nil {
		shards.Close()
		return nil, nil, err
	}
	r := &migrate.Runner{Registry: c, Sources: src, Backlog: reader, LeaseTTL: rf.leaseTTL, Poll: rf.poll,
		StuckAfter: rf.stuckAfter, OnEvent: ep.print, Shards: shards}
	// A cutover with a clients step reaches the cluster the kubectl flags
	// name; one without never touches it, so no kubeconfig is needed then.
	r.Kube, r.KubeErr = kube.New(f.Globals.Kube)
	return r, ep, nil
}

// CutoverApplyOptions runs a cutover.
type CutoverApplyOptions struct {
	f        *cmdutil.RegistryFlags
	pf       planFlags
	rf       runnerFlags
	planFile string
	yes      bool
	dryRun   string
	dry      kube.DryRun
	printer  *output.Printer
	c        *registryclient.Client
	// given are the plan flags the command line set.
	given []string
}

func newCmdCutoverApply(f *cmdutil.RegistryFlags) *cobra.Command {
	o := &CutoverApplyOptions{f: f}
	cmd := &cobra.Command{
		Use:   "apply (--from POOL --to POOL | --plan FILE)",
		Short: "Run a cutover: preflight, weights step by step under the gates, drain the old pool; resume one in progress",
		Example: `  shardctl cutover apply --from blue --to green --yes
  shardctl cutover apply --plan plan.json --yes --log cutover.jsonl
  shardctl cutover apply --from blue --to green --pause-before promote --yes -o json`,
		Args: cobra.NoArgs,
		RunE: cmdutil.RunOptions(o),
	}
	o.pf.add(cmd)
	o.pf.completions(cmd)
	o.rf.add(cmd)
	cmd.Flags().StringVar(&o.planFile, "plan", "", "run a plan saved by cutover plan --out (refused if the registry moved on since); only --pause-before and --drain-timeout may change how it runs")
	cmd.Flags().BoolVar(&o.yes, "yes", false, "do not ask; required without a terminal")
	addDryRunFlag(cmd, &o.dryRun)
	return cmd
}

// addDryRunFlag adds kubectl's --dry-run.
func addDryRunFlag(cmd *cobra.Command, v *string) {
	cmd.Flags().StringVar(v, "dry-run", "none", `change nothing: "client" prints the plan and the exact Kubernetes patches, "server" sends them for the API server to check and prints its answers`)
	_ = cmd.RegisterFlagCompletionFunc("dry-run", completions.Values("none", "client", "server"))
}

func (o *CutoverApplyOptions) Complete(cmd *cobra.Command, _ []string) (err error) {
	o.given = o.pf.given(cmd.Flags())
	if o.planFile != "" {
		// A saved plan is what was reviewed: a flag that would change it
		// is refused, never ignored.
		for _, name := range o.given {
			if !slices.Contains(overridesOfAPlan, name) {
				return cmdutil.Usagef("--%s with --plan: the plan in %s fixes it; make a new plan (cutover plan --%s … --out FILE), or drop --%s (with --plan only --%s apply)",
					name, o.planFile, name, name, strings.Join(overridesOfAPlan, " and --"))
			}
		}
	}
	if o.dry, err = kube.ParseDryRun(o.dryRun); err != nil {
		return cmdutil.UsageError(err)
	}
	if o.printer, err = o.f.Globals.Printer(); err != nil {
		return err
	}
	if o.c, err = o.f.Client(); err != nil {
		return err
	}
	return o.pf.complete(o.f.Globals, o.f.App)
}

func (o *CutoverApplyOptions) Validate() error {
	if o.planFile == "" {
		if o.pf.opts.From == "" || o.pf.opts.To == "" {
			return fmt.Errorf("give --from and --to, or --plan FILE")
		}
		return o.pf.validate(o.f.Globals)
	}
	// The overrides of a saved plan, checked as a plan's own options are.
	if err := o.pf.opts.ValidateRun(); err != nil {
		return cmdutil.UsageError(err)
	}
	return nil
}

// savedPlan reads --plan, with --pause-before and --drain-timeout applied
// (each said on stderr when it changes the plan), made again from the
// registry as it is now: a registry that moved on refuses it.
func (o *CutoverApplyOptions) savedPlan(ctx context.Context) (migrate.Plan, error) {
	saved, err := migrate.ReadPlan(o.planFile)
	if err != nil {
		return migrate.Plan{}, err
	}
	opts := saved.Options()
	flags := map[string]string{}
	if slices.Contains(o.given, "pause-before") {
		opts.PauseBefore = o.pf.opts.PauseBefore
		flags["pause-before"] = fmt.Sprintf("%q (the plan says %q)", opts.PauseBefore, saved.PauseBefore)
	}
	if slices.Contains(o.given, "drain-timeout") {
		opts.DrainTimeout = o.pf.opts.DrainTimeout
		flags["drain-timeout"] = fmt.Sprintf("%v (the plan says %v)", opts.DrainTimeout, time.Duration(saved.DrainTimeout))
	}
	plan, err := migrate.MakePlan(ctx, o.c, opts)
	if err != nil {
		return plan, err
	}
	if drift := migrate.Drift(saved, plan); drift != "" {
		return plan, cmdutil.Refused(fmt.Errorf("plan %s was made from another registry state (fingerprint %s, now %s): %s; make a new plan", o.planFile, saved.Fingerprint, plan.Fingerprint, drift))
	}
	for _, name := range slices.Sorted(maps.Keys(flags)) {
		fmt.Fprintf(o.f.Globals.Streams.ErrOut, "plan %s: --%s %s\n", o.planFile, name, flags[name])
	}
	return plan, nil
}

// resumable refuses to resume a cutover in progress under a plan other
// than the one it began with: a flag (or a plan file) that would change
// it must not be dropped in silence.
func (o *CutoverApplyOptions) resumable(ctx context.Context, plan migrate.Plan) error {
	rec, err := o.c.Cutover(ctx, plan.Name)
	if registryclient.IsNotFound(err) || err == nil && registryapi.Final(rec.Phase) {
		return nil
	}
	if err != nil {
		return err
	}
	running, err := migrate.PlanOf(rec)
	if err != nil {
		return err
	}
	differences := running.Differences(plan)
	var conflicts []string
	for _, option := range differences {
		for _, name := range planOptionFlags[option] {
			if o.planFile != "" || slices.Contains(o.given, name) {
				conflicts = append(conflicts, "--"+name)
			}
		}
	}
	if o.planFile != "" && len(conflicts) == 0 && len(differences) > 0 {
		conflicts = append(conflicts, "--plan "+o.planFile)
	}
	if len(conflicts) == 0 {
		return nil
	}
	return cmdutil.Refused(fmt.Errorf("cutover %s is in progress (step %d of %d: %s) with the plan it began with, which %s would change: run cutover apply without them to resume it, or cutover rollback %s and apply again",
		rec.Name, min(rec.Step+1, running.Total()), running.Total(), running.StepName(min(rec.Step, running.Total()-1)), strings.Join(conflicts, ", "), rec.Name))
}

func (o *CutoverApplyOptions) Run(ctx context.Context) error {
	var plan migrate.Plan
	var err error
	if o.planFile != "" {
		if plan, err = o.savedPlan(ctx); err != nil {
			return err
		}
		src, err := cutoverSources(o.f.Globals)
		if err != nil {
			return err
		}
		if err := migrate.CheckSources(plan.Gates, src); err != nil {
			return cmdutil.UsageError(err)
		}
	} else if plan, err = migrate.MakePlan(ctx, o.c, o.pf.opts); err != nil {
		return err
	}
	if err := o.resumable(ctx, plan); err != nil {
		return err
	}
	if o.dry != kube.DryRunNone {
		return o.dryRunPlan(ctx, plan)
	}
	if !plan.Changes {
		fmt.Fprintln(o.f.Globals.Streams.ErrOut, plan.Actions[0])
		return nil
	}
	if !o.yes {
		if !cmdutil.IsTerminal(o.f.Globals.Streams.In) {
			return cmdutil.Usagef("cutover apply changes where new work goes: give --yes to run it without a terminal")
		}
		if err := confirm(o.f.Globals, "cutover "+plan.Name+" will:", plan.Actions); err != nil {
			return err
		}
	}
	r, ep, err := o.rf.runner(o.f, o.c, o.printer)
	if err != nil {
		return err
	}
	defer ep.close()
	defer r.Close()
	_, err = r.Apply(ctx, plan)
	if err == nil {
		err = ep.err
	}
	return cutoverError(err)
}

// dryRunPlan prints what apply would do and the exact Kubernetes patches
// (with server, the API server's answers to them); nothing is written.
func (o *CutoverApplyOptions) dryRunPlan(ctx context.Context, plan migrate.Plan) error {
	changes, err := clientChanges(ctx, o.f.Globals, plan, o.dry, false)
	if err != nil {
		return err
	}
	if o.printer.Format.Machine() {
		return o.printer.Print(plannedChanges{Plan: plan, DryRun: o.dry, Patches: changes})
	}
	printPlan(o.f.Globals.Streams.Out, plan)
	printChanges(o.f.Globals.Streams.Out, changes, o.dry)
	fmt.Fprintf(o.f.Globals.Streams.Out, "dry run (%s): nothing changed\n", o.dry)
	return nil
}

// confirm lists what is about to happen and asks at the terminal.
func confirm(g *cmdutil.Globals, title string, actions []string) error {
	fmt.Fprintln(g.Streams.Out, title)
	for i, a := range actions {
		fmt.Fprintf(g.Streams.Out, "  %d. %s\n", i+1, a)
	}
	fmt.Fprint(g.Streams.Out, "go on? [y/N] ")
	answer, _ := bufio.NewReader(g.Streams.In).ReadString('\n')
	if a := strings.ToLower(strings.TrimSpace(answer)); a != "y" && a != "yes" {
		return errors.New("nothing done")
	}
	return nil
}

// CutoverStatusOptions prints a cutover's state, or waits for one.
type CutoverStatusOptions struct {
	f       *cmdutil.RegistryFlags
	kube    *kube.Cluster
	name    string
	watch   bool
	waitFor string
	timeout time.Duration
	printer *output.Printer
	c       *registryclient.Client
}

func newCmdCutoverStatus(f *cmdutil.RegistryFlags) *cobra.Command {
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
		RunE: cmdutil.RunOptions(o),
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
	if o.printer, err = o.f.Globals.Printer(); err != nil {
		return err
	}
	o.c, err = o.f.Client()
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
	registryapi.Cutover
	StepName string           `json:"stepName"`
	Steps    int              `json:"steps"`
	Progress migrate.Progress `json:"progress"`
	// Kubernetes is where the clients step stands (--mode k8s).
	Kubernetes *migrate.KubeStatus `json:"kubernetes,omitempty"`
}

// shown is what a watch prints again when it changes: the record without
// what every lease renewal rewrites (its version, the lease's end).
func (st cutoverStatus) shown() string {
	st.Version, st.LeaseExpires, st.UpdatedAt = 0, nil, time.Time{}
	b, _ := json.Marshal(st)
	return string(b)
}

func (o *CutoverStatusOptions) read(ctx context.Context) (cutoverStatus, error) {
	var rec registryapi.Cutover
	var err error
	if o.name != "" {
		rec, err = o.c.Cutover(ctx, o.name)
	} else {
		rec, err = migrate.Current(ctx, o.c, o.f.App)
	}
	if err != nil {
		return cutoverStatus{}, err
	}
	st := cutoverStatus{Cutover: rec, Progress: migrate.ProgressOf(rec)}
	st.Spec, st.Status = nil, nil
	if plan, err := migrate.PlanOf(rec); err == nil {
		st.Steps = plan.Total()
		st.StepName = plan.StepName(min(rec.Step, plan.Total()-1))
		if plan.Kube != nil {
			// The cluster unread is said, not fatal: the registry's side
			// (and --wait-for) stands without it.
			if o.kube == nil {
				o.kube, err = kube.New(o.f.Globals.Kube)
			}
			if err == nil {
				st.Kubernetes, err = migrate.KubeStatusOf(ctx, o.kube, plan)
			}
			if err != nil {
				st.Kubernetes = &migrate.KubeStatus{Namespace: plan.Kube.Namespace, LeaseName: kube.LeaseName(rec.Name), Error: err.Error()}
			}
		}
	}
	return st, nil
}

// reached says whether a status answers --wait-for, and the exit error
// when it never will.
func (o *CutoverStatusOptions) reached(st cutoverStatus) (bool, error) {
	switch st.Phase {
	case registryapi.PhaseRolledBack, registryapi.PhaseFailed:
		return false, cmdutil.Refused(fmt.Errorf("cutover %s %s: %s", st.Name, st.Phase, st.Message))
	case registryapi.PhasePaused:
		if st.Progress.Inconclusive != "" {
			return false, &cmdutil.ExitError{Code: cmdutil.ExitUnknown, Err: fmt.Errorf("cutover %s paused, inconclusive: %s", st.Name, st.Progress.Inconclusive)}
		}
		if o.waitFor == "paused" {
			return true, nil
		}
		return false, &cmdutil.ExitError{Code: cmdutil.ExitPaused, Err: fmt.Errorf("cutover %s %s", st.Name, st.Message)}
	case registryapi.PhaseDone:
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
	last := st.shown()
	for {
		if o.waitFor != "" {
			ok, err := o.reached(st)
			if ok || err != nil {
				return err
			}
		} else if registryapi.Final(st.Phase) {
			_, err := o.reached(st)
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline:
			return cmdutil.TimedOut(fmt.Errorf("cutover %s still %s at step %d of %d (%s) after %v", st.Name, st.Phase, st.Step+1, st.Steps, st.StepName, o.timeout))
		case <-tick.C:
		}
		if st, err = o.read(ctx); err != nil {
			return err
		}
		if o.watch && st.shown() != last {
			last = st.shown()
			if err := show(st); err != nil {
				return err
			}
		}
	}
}

// describe prints a status for a person.
func (o *CutoverStatusOptions) describe(st cutoverStatus) {
	w, c := o.f.Globals.Streams.Out, o.printer.Colors
	phase := st.Phase
	switch st.Phase {
	case registryapi.PhaseRolledBack, registryapi.PhaseFailed:
		phase = c.Bad(phase)
	case registryapi.PhasePaused:
		phase = c.Warn(phase)
	case registryapi.PhaseDone:
		phase = c.Good(phase)
	}
	where := fmt.Sprintf("step %d of %d: %s", min(st.Step+1, st.Steps), st.Steps, st.StepName)
	switch {
	case st.Phase == registryapi.PhaseRolledBack && st.Step >= st.Steps:
		where = "after it was done"
	case registryapi.Final(st.Phase) && st.Phase != registryapi.PhaseDone:
		where = "at " + where // where it stopped, not where it is
	}
	fmt.Fprintf(w, "cutover %s (%s): %s → %s, %s, %s\n", st.Name, st.App, st.From, st.To, phase, where)
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
	// A rolled-back cutover undrained its old pool: what the drain last
	// said of it is no longer so.
	if st.Phase != registryapi.PhaseRolledBack {
		for _, id := range slices.Sorted(maps.Keys(st.Progress.Drain)) {
			e := st.Progress.Drain[id]
			fmt.Fprintf(w, "  %s\n", e.Line())
		}
	}
	if st.Kubernetes != nil {
		for _, line := range st.Kubernetes.Lines(time.Now()) {
			fmt.Fprintf(w, "  kubernetes: %s\n", line)
		}
	}
}

// namedCutover is what promote and rollback share: the cutover they act
// on (the app's current one unless named) and a runner to act with.
type namedCutover struct {
	f       *cmdutil.RegistryFlags
	rf      runnerFlags
	name    string
	yes     bool
	printer *output.Printer
	c       *registryclient.Client
}

// addYes adds --yes: at a terminal promote and rollback say what they
// will do and ask first; a script (no terminal) is not asked, as before.
func (n *namedCutover) addYes(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&n.yes, "yes", false, "do not ask at a terminal")
}

// confirm asks at a terminal unless --yes.
func (n *namedCutover) confirm(title string, actions ...string) error {
	if n.yes || !cmdutil.IsTerminal(n.f.Globals.Streams.In) {
		return nil
	}
	return confirm(n.f.Globals, title, actions)
}

func (n *namedCutover) Complete(_ *cobra.Command, args []string) (err error) {
	if len(args) > 0 {
		n.name = args[0]
	}
	if n.printer, err = n.f.Globals.Printer(); err != nil {
		return err
	}
	n.c, err = n.f.Client()
	return err
}

func (n *namedCutover) Validate() error { return nil }

// runner resolves the cutover's name and starts a runner; the caller
// closes the event printer it returns.
func (n *namedCutover) runner(ctx context.Context) (string, *migrate.Runner, *eventPrinter, error) {
	name := n.name
	if name == "" {
		rec, err := migrate.Current(ctx, n.c, n.f.App)
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

func newCmdCutoverPromote(f *cmdutil.RegistryFlags) *cobra.Command {
	o := &CutoverPromoteOptions{namedCutover{f: f}}
	cmd := &cobra.Command{
		Use:   "promote [NAME]",
		Short: "Let a paused cutover go on, and run it to its end (a done one: nothing to do)",
		Example: `  shardctl cutover promote blue-to-green
  shardctl cutover promote --yes -o json`,
		Args: cobra.MaximumNArgs(1),
		RunE: cmdutil.RunOptions(o),
	}
	o.rf.add(cmd)
	o.addYes(cmd)
	return cmd
}

func (o *CutoverPromoteOptions) Run(ctx context.Context) error {
	name, r, ep, err := o.runner(ctx)
	if err != nil {
		return err
	}
	defer ep.close()
	defer r.Close()
	if err := o.confirm("cutover "+name+" will:", "go on from where it paused, and run to its end"); err != nil {
		return err
	}
	_, err = r.Promote(ctx, name)
	return cutoverError(err)
}

// CutoverRollbackOptions sends new work back to the old pool.
type CutoverRollbackOptions struct {
	namedCutover
	drainTarget  bool
	drainTimeout time.Duration
	keepClients  bool
	dryRun       string
}

func newCmdCutoverRollback(f *cmdutil.RegistryFlags) *cobra.Command {
	o := &CutoverRollbackOptions{namedCutover: namedCutover{f: f}}
	cmd := &cobra.Command{
		Use:   "rollback [NAME]",
		Short: "Send new work back to the old pool at once and undrain it; --drain-target drains the new pool",
		Long: `Set the weights back to the old pool at once (a running apply stops), set the
old pool's DRAINING or OUT_OF_SERVICE shards UP again, and mark the cutover
RolledBack. A cutover with --mode k8s then gets its Service's selector and its
endpoint back exactly as they were, and the workloads it restarted restarted
again (--keep-clients leaves them on the proxy; --dry-run prints the patches). The new pool keeps and finishes the instances it took; with
--drain-target it is drained as drain --wait does. Running it twice changes
nothing more.`,
		Example: `  shardctl cutover rollback
  shardctl cutover rollback blue-to-green --drain-target --yes`,
		Args: cobra.MaximumNArgs(1),
		RunE: cmdutil.RunOptions(o),
	}
	o.rf.add(cmd)
	o.addYes(cmd)
	cmd.Flags().BoolVar(&o.drainTarget, "drain-target", false, "drain the new pool too, until it holds nothing")
	cmd.Flags().DurationVar(&o.drainTimeout, "drain-timeout", migrate.DefaultDrainTimeout, "with --drain-target: how long the new pool may take to empty (exit 4)")
	cmd.Flags().BoolVar(&o.keepClients, "keep-clients", false, "--mode k8s: leave the Service, the endpoint and the workloads as the cutover set them (clients keep reaching the proxy); roll back the weights only")
	addDryRunFlag(cmd, &o.dryRun)
	return cmd
}

func (o *CutoverRollbackOptions) Run(ctx context.Context) error {
	dry, err := kube.ParseDryRun(o.dryRun)
	if err != nil {
		return cmdutil.UsageError(err)
	}
	name, r, ep, err := o.runner(ctx)
	if err != nil {
		return err
	}
	defer ep.close()
	defer r.Close()
	if dry != kube.DryRunNone {
		return o.dryRunRollback(ctx, name, dry)
	}
	what := []string{"send new instances back to the old pool at once, and set its drained shards UP"}
	if o.drainTarget {
		what = append(what, "drain the new pool until it holds nothing")
	}
	if err := o.confirm("cutover rollback of "+name+" will:", what...); err != nil {
		return err
	}
	_, err = r.Rollback(ctx, name, migrate.RollbackOptions{DrainTarget: o.drainTarget, DrainTimeout: o.drainTimeout, KeepClients: o.keepClients})
	if errors.Is(err, kube.ErrRolloutTimeout) {
		return cmdutil.TimedOut(fmt.Errorf("%v: run cutover rollback again to wait for it", err))
	}
	var ne *drain.NotEmptyError
	if errors.As(err, &ne) && errors.Is(err, context.DeadlineExceeded) {
		return cmdutil.TimedOut(fmt.Errorf("drain of the new pool %v", err))
	}
	return err
}

// dryRunRollback prints what a rollback would do, with the exact
// Kubernetes patches; nothing is written.
func (o *CutoverRollbackOptions) dryRunRollback(ctx context.Context, name string, dry kube.DryRun) error {
	rec, err := o.c.Cutover(ctx, name)
	if err != nil {
		return err
	}
	plan, err := migrate.PlanOf(rec)
	if err != nil {
		return err
	}
	var changes []kube.Change
	if !o.keepClients {
		if changes, err = clientChanges(ctx, o.f.Globals, plan, dry, true); err != nil {
			return err
		}
	}
	if o.printer.Format.Machine() {
		return o.printer.Print(plannedChanges{Plan: plan, DryRun: dry, Patches: changes})
	}
	w := o.f.Globals.Streams.Out
	fmt.Fprintf(w, "cutover %s (%s, step %d of %d) would roll back: weights %s 100 / %s 0, %s's DRAINING or OUT_OF_SERVICE shards UP again\n",
		name, rec.Phase, min(rec.Step+1, plan.Total()), plan.Total(), plan.From, plan.To, plan.From)
	printChanges(w, changes, dry)
	fmt.Fprintf(w, "dry run (%s): nothing changed\n", dry)
	return nil
}
