package probe

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardctl/shardctl/commands/cmdutil"
	"github.com/shardctl/shardctl/commands/output"
	"github.com/shardctl/shardctl/internal/human"
	"github.com/shardctl/shardctl/internal/registry/registryapi"
	"github.com/shardctl/shardctl/internal/registry/registryclient"
	"github.com/shardctl/shardctl/probes/health"
)

// ProbeHealthOptions checks the parts of a federation.
type ProbeHealthOptions struct {
	g        *cmdutil.Globals
	app      string
	proxy    string
	timeout  time.Duration
	watch    bool
	interval time.Duration
	shards   cmdutil.ShardAccessFlags

	targets []health.Target
	rc      *registryclient.Client
	printer *output.Printer
}

func newCmdProbeHealth(g *cmdutil.Globals) *cobra.Command {
	o := &ProbeHealthOptions{g: g}
	cmd := &cobra.Command{
		Use:   "health [TARGET...]",
		Short: "Check shards, the proxy, the registry and Prometheus the way their readiness says",
		Long: `Check every part of a federation at once, each within --timeout:

  zeebe=HOST:PORT       a Zeebe gateway (a shard or the proxy's gateway port):
                        its topology over gRPC; healthy when it has brokers
                        and every partition a leader, all replicas HEALTHY
  HOST:PORT             the same: a bare address is a Zeebe gateway
  registry=URL          the registry's /readyz (its Eureka URL will do)
  proxy=URL             the proxy's admin /readyz
  prometheus=URL        Prometheus's /-/ready

A shard is reached as the proxies reach it: over the TLS and with the
credential its registry metadata names (tls, credential), checked against
--upstream-ca, the credential defined by --shard-credentials FILE (a
credentials: map, as the proxy's configuration) or the --shard-* flags (the
"default" one). A shard that refuses the credential is named so
(UNAUTHENTICATED), never as unreachable; so is one that refuses the
proxies' own (they cannot replay deployments to it).

With no TARGET, every shard the registry lists (by id), the registry
itself, every proxy registered there (its gateway and its admin), a proxy
not registered when --proxy names its admin URL, and Prometheus when
--prometheus (or SHARDCTL_PROMETHEUS) names one.

Exit 0 when every target is healthy, 3 when any is not (the table says
why), 1 when the registry cannot list the shards. --watch checks again
every --interval until Ctrl-C, printing the rows of each round (JSON lines
with -o json), and exits with the last round's code.`,
		Example: `  # everything the registry knows
  shardctl probe health

  # two shards and Prometheus, as JSON
  shardctl probe health 10.0.0.5:26500 zeebe=10.0.0.6:26500 prometheus=http://prom:9090 -o json

  # a live table
  shardctl probe health --watch --interval 5s`,
		ValidArgsFunction: cobra.NoFileCompletions,
		RunE:              cmdutil.RunOptions(o),
	}
	f := cmd.Flags()
	f.StringVar(&o.app, "app", registryapi.DefaultShardsApp, "registry application of the shards (with no TARGET)")
	f.StringVar(&o.proxy, "proxy", "", "the proxy's admin URL, checked with no TARGET (env SHARDCTL_PROXY)")
	f.DurationVar(&o.timeout, "timeout", health.DefaultTimeout, "the most one target's check takes")
	f.BoolVar(&o.watch, "watch", false, "check again every --interval until interrupted")
	f.DurationVar(&o.interval, "interval", 2*time.Second, "with --watch: how often to check")
	o.shards.AddFlags(f)
	return cmd
}

func (o *ProbeHealthOptions) Complete(_ *cobra.Command, args []string) (err error) {
	if o.proxy == "" {
		o.proxy = o.g.Getenv("SHARDCTL_PROXY")
	}
	o.printer, err = o.g.Printer()
	if err != nil {
		return err
	}
	for _, a := range args {
		t, err := health.ParseTarget(a)
		if err != nil {
			return cmdutil.UsageError(err)
		}
		o.targets = append(o.targets, t)
	}
	if len(args) == 0 {
		o.rc, err = o.g.RegistryClient("", "")
	}
	return err
}

func (o *ProbeHealthOptions) Validate() error {
	if o.timeout <= 0 || o.interval <= 0 {
		return errors.New("--timeout and --interval: want them above 0")
	}
	if o.proxy != "" {
		if _, err := health.ParseTarget(health.KindProxy + "=" + o.proxy); err != nil {
			return fmt.Errorf("--proxy: %w", err)
		}
	}
	return nil
}

func (o *ProbeHealthOptions) Run(ctx context.Context) error {
	access, err := o.shards.Access(nil)
	if err != nil {
		return err
	}
	defer access.Close()
	admin, err := o.g.ProxyAdmin()
	if err != nil {
		return err
	}
	checker := &health.Checker{Timeout: o.timeout, Shards: access, ProxyHTTP: admin.HTTP}
	if o.rc != nil {
		checker.HTTP = &http.Client{Transport: o.rc.HTTP.Transport} // an https registry's CA and client certificate
	}
	stream := o.printer.Stream()
	for {
		targets := o.targets
		if o.rc != nil {
			// Listed again each round: a watch follows shards coming
			// and going.
			var err error
			targets, err = health.FederationTargets(ctx, o.rc, admin, o.app, o.proxy, o.g.PrometheusURL())
			if err != nil {
				return err
			}
		}
		rep := checker.Check(ctx, targets)
		if ctx.Err() != nil {
			return nil
		}
		var err error
		if o.watch {
			err = stream.Emit(healthView{rep})
		} else {
			err = o.printer.Print(healthView{rep})
		}
		if err != nil {
			return err
		}
		verdict := healthVerdict(rep)
		if !o.watch {
			return verdict
		}
		select {
		case <-ctx.Done():
			return verdict
		case <-time.After(o.interval):
		}
	}
}

// healthVerdict is exit 3 naming what is unhealthy, else nil.
func healthVerdict(rep health.Report) error {
	if rep.Healthy() {
		return nil
	}
	bad := rep.Unhealthy()
	return cmdutil.Refused(fmt.Errorf("%d of %d unhealthy: %s", len(bad), len(rep.Results), strings.Join(bad, "; ")))
}

// healthView is a health report as a table; its JSON is the report's.
type healthView struct{ health.Report }

func (v healthView) Header(wide bool) []string {
	h := []string{"NAME", "KIND", "ADDRESS", "HEALTHY", "TOOK", "REASON"}
	if wide {
		h = append(h, "PARTITIONS")
	}
	return h
}

func (v healthView) Rows(wide bool, c output.Colors) [][]string {
	var rows [][]string
	for _, r := range v.Results {
		healthy := c.Good("yes")
		if !r.Healthy {
			healthy = c.Bad("no")
		}
		row := []string{r.Name, r.Kind, r.Address, healthy, human.Latency(r.Seconds), r.Reason}
		if wide {
			row = append(row, partitionsCell(r.Topology))
		}
		rows = append(rows, row)
	}
	return rows
}

// partitionsCell is each partition's leader and replica health, e.g.
// "1:L0 HEALTHY 2:- ".
func partitionsCell(t *health.Topology) string {
	if t == nil {
		return "-"
	}
	var parts []string
	for _, p := range t.Partitions {
		leader := "-"
		if p.Leader >= 0 {
			leader = fmt.Sprintf("L%d", p.Leader)
		}
		id := strconv.Itoa(int(p.ID))
		if p.Cluster != "" {
			id = p.Cluster + "/" + id
		}
		parts = append(parts, fmt.Sprintf("%s:%s %s", id, leader, strings.Join(p.Health, ",")))
	}
	return strings.Join(parts, " ")
}
