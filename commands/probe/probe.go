package probe

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/shardctl/shardctl/commands/cmdutil"
	"github.com/shardctl/shardctl/commands/output"
	"github.com/shardctl/shardctl/internal/human"
	"github.com/shardctl/shardctl/probes/registryprobe"
)

// NewCmdProbe builds `shardctl probe`, the measurements.
func NewCmdProbe(g *cmdutil.Globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "probe",
		Short:   "Check and measure: health of every part, capacity (the knee), a registry's throughput",
		GroupID: cmdutil.GroupObserve,
		Args:    cobra.NoArgs,
	}
	cmd.AddCommand(newCmdProbeHealth(g), newCmdProbeCapacity(g), newCmdProbeRegistry(g))
	return cmd
}

// ProbeRegistryOptions measures a registry.
type ProbeRegistryOptions struct {
	g           *cmdutil.Globals
	cfg         registryprobe.Config
	concurrency []int
	tokenFile   string
	baseline    string
	printer     *output.Printer
}

func newCmdProbeRegistry(g *cmdutil.Globals) *cobra.Command {
	o := &ProbeRegistryOptions{g: g}
	cmd := &cobra.Command{
		Use:   "registry",
		Short: "Measure a registry the published way: registrations, the 70/20/10 mix, fetches, failure detection",
		Long: `Measure a Eureka-compatible registry (shardctl's, or Eureka itself) with the
method of the published Eureka evaluation, as any Eureka client would:

  register (empty)      unique registrations from --concurrency workers, each
                        level --burst of them or --duration, whichever first
  register (N present)  the same at 50 workers with --background instances
                        registered in another app: the cost of size
  mix 70/20/10          50 workers for --duration over --instances: 70%
                        renewals, 20% registrations and cancellations, 10%
                        full fetches gzipped (as Eureka clients ask): the most
                        the registry does
  mix … at R/s          the same mix offered at --mix-rate a second whatever
                        the answers take (open loop, latency counted from
                        when a request was due): its latency at that load
  full fetch, gzip      10 workers fetching the whole registry
  delta fetch           10 workers fetching the delta
  failure detection     one instance with a --lease lease that never renews:
                        the time until the registry's watch and a fresh full
                        fetch no longer list it

Each phase prints ops/s, p50, p99 and errors; with --baseline FILE (the -o
json of an earlier run: another store, another version, Eureka itself) each
phase is printed beside the baseline's, with the ratio of ops/s. The probe
registers in apps named SHARDCTL-PROBE*, and cancels everything it
registered when it ends, Ctrl-C included. The probe shares the machine with the registry when both
run here: say so beside its figures.`,
		Example: `  # the published method against a local registry (about 7 minutes)
  shardctl probe registry --registry http://127.0.0.1:8761/eureka

  # a quick look, as JSON
  shardctl probe registry --duration 5s --burst 5000 --concurrency 50 -o json

  # three replicas over etcd beside one registry in memory
  shardctl probe registry --registry http://memory:8761/eureka -o json > memory.json
  shardctl probe registry --registry http://replica-a:8761/eureka --baseline memory.json`,
		Args:              cobra.NoArgs,
		ValidArgsFunction: cobra.NoFileCompletions,
		RunE:              cmdutil.RunOptions(o),
	}
	f := cmd.Flags()
	f.IntVar(&o.cfg.Instances, "instances", registryprobe.DefaultInstances, "instances in the mix and the fetches")
	f.IntSliceVar(&o.concurrency, "concurrency", registryprobe.DefaultConcurrency, "workers of each register phase")
	f.DurationVar(&o.cfg.Duration, "duration", registryprobe.DefaultDuration, "the most each phase runs")
	f.IntVar(&o.cfg.Burst, "burst", registryprobe.DefaultBurst, "registrations after which a register phase ends")
	f.IntVar(&o.cfg.Background, "background", registryprobe.DefaultBackground, "instances registered in another app for the size and mix phases")
	f.Float64Var(&o.cfg.MixRate, "mix-rate", registryprobe.DefaultMixRate, "operations a second the open-loop mix offers")
	f.DurationVar(&o.cfg.Lease, "lease", registryprobe.DefaultLease, "lease of the instance whose death is timed (whole seconds)")
	f.StringVar(&o.baseline, "baseline", "", "a report of an earlier run (-o json) to print each phase beside, with the ratio")
	f.StringVar(&o.tokenFile, "registry-token-file", "", "file with the bearer token the registry wants for writes (env SHARDCTL_REGISTRY_TOKEN)")
	return cmd
}

func (o *ProbeRegistryOptions) Complete(*cobra.Command, []string) (err error) {
	o.printer, err = o.g.Printer()
	if err != nil {
		return err
	}
	o.cfg.Concurrency = o.concurrency
	o.cfg.Registry, err = o.g.RegistryClient("", o.tokenFile)
	return err
}

func (o *ProbeRegistryOptions) Validate() error {
	// A flag set to 0 is a mistake here, not a wish for the default.
	if o.cfg.Instances <= 0 || o.cfg.Burst <= 0 || o.cfg.MixRate <= 0 || o.cfg.Duration <= 0 || o.cfg.Lease <= 0 {
		return fmt.Errorf("--instances, --burst, --mix-rate, --duration and --lease: want them above 0")
	}
	return o.cfg.Check()
}

func (o *ProbeRegistryOptions) Run(ctx context.Context) error {
	// A load generator that collects garbage as often as the default
	// would measure its own pauses beside the registry's.
	cmdutil.CollectLessOften()
	errOut := o.g.Streams.ErrOut
	if cmdutil.IsTerminal(errOut) {
		// A line that redraws itself on a terminal only: logs and pipes
		// get the table alone.
		o.cfg.Progress = func(phase string, done float64) {
			fmt.Fprintf(errOut, "\r\x1b[K%s %s", output.Bar(done, 20), phase)
			if done >= 1 {
				fmt.Fprint(errOut, "\r\x1b[K")
			}
		}
	}
	var base *registryprobe.Report
	if o.baseline != "" {
		// Read before the run: a wrong path must not cost minutes.
		b, err := os.ReadFile(o.baseline)
		if err != nil {
			return fmt.Errorf("--baseline: %w", err)
		}
		base = &registryprobe.Report{}
		if err := json.Unmarshal(b, base); err != nil || len(base.Phases) == 0 {
			return fmt.Errorf("--baseline %s: not a report of shardctl probe registry -o json (%v)", o.baseline, err)
		}
	}
	rep, err := registryprobe.Run(ctx, o.cfg)
	if base != nil {
		rep.Compare(*base)
	}
	if len(rep.Phases) > 0 || rep.Detection != nil {
		if perr := o.printer.Print(probeView{rep}); perr != nil {
			return perr
		}
	}
	return err
}

// probeView is a probe's report as a table; its JSON is the report's.
type probeView struct{ registryprobe.Report }

func (v probeView) Header(bool) []string {
	h := []string{"PHASE", "CONCURRENCY", "OPS", "OPS/S", "P50", "P99", "ERRORS"}
	if len(v.Baseline) > 0 {
		h = append(h, "BASELINE OPS/S", "BASELINE P99", "RATIO")
	}
	return h
}

func (v probeView) Rows(wide bool, c output.Colors) [][]string {
	var rows [][]string
	for _, ph := range v.Phases {
		errs := strconv.Itoa(ph.Errors)
		if ph.Errors > 0 {
			errs = c.Bad(errs)
			if wide {
				errs += " " + ph.FirstError
			}
		}
		row := []string{ph.Name, strconv.Itoa(ph.Concurrency), strconv.Itoa(ph.Ops), human.Rate(ph.PerSec),
			human.Latency(ph.P50), human.Latency(ph.P99), errs}
		if len(v.Baseline) > 0 {
			if b, ok := v.Compared(ph); ok {
				row = append(row, human.Rate(b.PerSec), human.Latency(b.P99), fmt.Sprintf("%.2f", b.Ratio))
			} else {
				row = append(row, "-", "-", "-")
			}
		}
		rows = append(rows, row)
	}
	if d := v.Detection; d != nil {
		row := []string{fmt.Sprintf("failure detection (lease %s)", human.Seconds(d.Lease)), "1", "1", "-",
			"watch " + human.Seconds(d.Watch), "fetch " + human.Seconds(d.Fetch), "0"}
		if len(v.Baseline) > 0 {
			row = append(row, "-", "-", "-")
		}
		rows = append(rows, row)
	}
	return rows
}
