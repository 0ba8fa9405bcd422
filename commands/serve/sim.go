package serve

import (
	"context"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardctl/shardctl/commands/cmdutil"
	"github.com/shardctl/shardctl/internal/authn"
	"github.com/shardctl/shardctl/internal/keyslot"
	"github.com/shardctl/shardctl/internal/physicaltenant"
	"github.com/shardctl/shardctl/internal/registry/registryapi"
	"github.com/shardctl/shardctl/internal/sim"
)

// NewCmdSim builds `shardctl sim`.
func NewCmdSim(g *cmdutil.Globals) *cobra.Command {
	return newRuntimeGroup("sim", "Run a simulated Zeebe cluster (a shard) for rehearsals, demos and tests",
		`The shard simulator behaves like a Zeebe cluster (8.5, 8.8 or 8.10) at the
gateway API and in its metric names, so shardctl's proxy, signals, drain and dashboards work
against it, and runbooks can be rehearsed without a real cluster.`,
		newCmdSimServe(g))
}

// SimServeOptions runs one simulated cluster until SIGTERM/SIGINT.
type SimServeOptions struct {
	g               *cmdutil.Globals
	cfg             sim.Config
	shutdownTimeout time.Duration
	version         string
	reg             simRegistration
	tls             tlsFiles
	auth            authn.Config
	logs            logFlags
}

// simRegistration is the sidecar part: register the simulator in the
// registry as a shard and heartbeat it, as a sidecar does for a real
// Zeebe gateway.
type simRegistration struct {
	url, tokenFile       string
	credential           string
	app, shardID, pool   string
	advertise, status    string
	slot                 int
	renewal, leaseLength time.Duration
}

func newCmdSimServe(g *cmdutil.Globals) *cobra.Command {
	o := &SimServeOptions{g: g}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the Zeebe gateway API and Zeebe's metrics from a simulated cluster",
		Long: `Serve the Zeebe gateway API (gRPC) of --zeebe-version on --listen and
/metrics, /healthz, /readyz and fault injection on --metrics. The first line on stderr is
"listening on HOST:PORT" (--listen 127.0.0.1:0 picks a free port), the
second "metrics on http://HOST:PORT/metrics"; then come log lines (a fault
injected or ended), as --log-format says.

Versions: 8.5 answers as the oldest Zeebe shardctl federates, with 8.5's
metric names; 8.8 adds instance tags (kept on the instance and its jobs,
and searchable), the cluster id and Micrometer's metric names (timers in
_seconds, zeebe_pending_incidents, zeebe_flow_control_*); 8.10 (the
default) adds EvaluateConditional (8.9), business ids, physical tenants
(--physical-tenants: the Camunda-Physical-Tenant header and the
/physical-tenants/{id}/v2 prefix; a tenant not served answers NOT_FOUND;
each tenant versions its processes apart) and the physicalTenantId label on
partition metrics. --write-rate-limit (8.8+) plays flow control's write-rate
limit: client commands past it are refused, counted as dropped requests
and as zeebe_flow_control_total{outcome="writeRateLimitExhausted"}, and the
records processing writes use it up too. Fields a version does not know are ignored, as its gateway ignores them,
and methods it does not have answer UNIMPLEMENTED.

What it runs: BPMN with none, message, signal and conditional start events; end events;
service tasks (zeebe:taskDefinition type, retries); sequence flows; exclusive
gateways with conditions such as "= amount > 100 and vip" and a default flow;
parallel gateways; intermediate message catch events (zeebe:subscription
correlationKey), signal catch events, and timer catch events with an ISO-8601
timeDuration (an instance waits without writing a record, then goes on);
error boundary events. Any other
element is rejected at deploy time with INVALID_ARGUMENT naming it.
Decisions, forms, modify, migrate and delete resource answer UNIMPLEMENTED.

Keys are Zeebe's (partitionId << 51 | counter, from partitionId<<51 + 1), so
two simulators issue the same keys, as two real clusters do.

Capacity: each partition processes --capacity records per second (0: as fast
as it can). Past --backlog-limit queued client commands a partition answers
RESOURCE_EXHAUSTED (backpressure). --degrade reproduces an overloaded
monolith: new instances are served first, and past --degrade-threshold queued
records the work behind them slows down as the backlog grows, up to
--degrade-max times as slow, so instances created per second keep rising
while completions collapse. The cap is what makes recovery honest, as
clusters recover: with the load stopped, a backlog built at twice the knee
takes longer to drain than it took to grow; held at half its knee, a cluster
works its backlog off, slowly (completions wait for the records ahead of them,
then catch up). At 5 it never recovers at half the knee; without a cap (the
model before) a degraded simulator completed almost nothing for minutes under
light load.

Fault injection on the --metrics port:
  POST /fault/pause?duration=5s   stall processing (a GC pause)
  POST /fault/slow?factor=4       every record takes 4x as long
  POST /fault/refuse              the gateway refuses connections
  POST /fault/resume              end every fault
  GET  /fault                     the current faults as JSON`,
		Example: `  # a three-partition shard on Zeebe's default ports
  shardctl sim serve --listen 127.0.0.1:26500 --metrics 127.0.0.1:9600

  # a small monolith that shows the knee past 200 records/s
  shardctl sim serve --listen :26500 --metrics :9600 --partitions 1 \
      --capacity 200 --degrade --backlog-limit -1

  # a shard that registers itself in the registry and heartbeats
  shardctl sim serve --listen 127.0.0.1:0 --metrics 127.0.0.1:0 \
      --register http://127.0.0.1:8761/eureka --shard-id blue-1 --pool blue

  # then, from another shell
  zbctl status --address 127.0.0.1:26500 --insecure
  curl -X POST 'http://127.0.0.1:9600/fault/pause?duration=10s'`,
		Args:              cobra.NoArgs,
		ValidArgsFunction: cobra.NoFileCompletions,
		RunE:              cmdutil.RunOptions(o),
	}
	f := cmd.Flags()
	f.StringVar(&o.cfg.Listen, "listen", "127.0.0.1:26500", "gateway (gRPC) address, HOST:PORT")
	f.StringVar(&o.version, "zeebe-version", sim.DefaultVersion.String(), "the Zeebe release to play: "+sim.VersionNames()+" (its gateway version, gRPC fields and methods)")
	f.StringSliceVar(&o.cfg.PhysicalTenants, "physical-tenants", nil, "the physical tenants served, comma-separated (8.10; default: default only); registered with --register, where a proxy places their work")
	f.Float64Var(&o.cfg.WriteRateLimit, "write-rate-limit", 0, "flow control's write-rate limit in records/s per partition (8.8+; 0: none): client commands past it get RESOURCE_EXHAUSTED")
	f.StringVar(&o.cfg.RESTListen, "rest-listen", "", "serve the REST API (/v2) on HOST:PORT too, over the same engine (Camunda 8.8's default client protocol; off by default)")
	f.StringVar(&o.cfg.MetricsListen, "metrics", "127.0.0.1:9600", "address of /metrics, /healthz, /readyz and /fault, HOST:PORT")
	f.Int32Var(&o.cfg.Partitions, "partitions", sim.DefaultPartitions, "partitions of the simulated cluster (1-127)")
	f.Float64Var(&o.cfg.Capacity, "capacity", 0, "records per second each partition processes; 0 is as fast as possible")
	f.IntVar(&o.cfg.BacklogLimit, "backlog-limit", sim.DefaultBacklogLimit, "queued client commands per partition before RESOURCE_EXHAUSTED; -1 never rejects")
	f.IntVar(&o.cfg.QueryHistory, "query-history", sim.DefaultQueryHistory, "ended instances, jobs and incidents each partition keeps for the REST API's searches (active ones are always kept)")
	f.BoolVar(&o.cfg.Degrade, "degrade", false, "reproduce an overloaded monolith's knee (see above)")
	f.IntVar(&o.cfg.DegradeThreshold, "degrade-threshold", sim.DefaultDegradeThreshold, "queued records past which --degrade slows the work behind new instances")
	f.Float64Var(&o.cfg.DegradeMax, "degrade-max", sim.DefaultDegradeMax, "with --degrade: the most a record behind new instances costs, in records (at least 1)")
	f.DurationVar(&o.cfg.TimerInterval, "timer-interval", sim.DefaultTimerInterval, "how often job deadlines, retry backoffs, message TTLs and timer catch events are checked")
	f.StringVar(&o.cfg.Exporter, "exporter", "", "name of an exporter that exports every record once processed (zeebe_exporter_last_exported_position); none by default")
	o.tls.addFlags(f, "the gateway")
	f.Uint32Var(&o.cfg.MaxConcurrentStreams, "max-concurrent-streams", 0, "calls per HTTP/2 connection the gateway advertises and allows (0: no limit)")
	f.DurationVar(&o.shutdownTimeout, "shutdown-timeout", 10*time.Second, "on SIGTERM, how long in-flight calls may take to finish")
	f.StringVar(&o.reg.url, "register", "", "registry URL to register this simulator in as a shard, and heartbeat (e.g. http://127.0.0.1:8761/eureka)")
	f.StringVar(&o.reg.shardID, "shard-id", "", "shard id to register as (with --register; default: sim-PORT)")
	f.StringVar(&o.reg.pool, "pool", "", "pool (e.g. blue or green) to register in (with --register)")
	f.IntVar(&o.reg.slot, "slot", 0, "key slot 1-31 to ask for (with --register; 0: the registry assigns one)")
	f.StringVar(&o.reg.app, "app", registryapi.DefaultShardsApp, "registry application of the shards (with --register)")
	f.StringVar(&o.reg.status, "status", "UP", "status to register with (with --register): UP, or OUT_OF_SERVICE to stay out of placement until undrain or a cutover lets it in")
	f.StringVar(&o.reg.advertise, "advertise", "", "gateway address to register, HOST:PORT (default: the address --listen bound)")
	f.DurationVar(&o.reg.renewal, "renewal-interval", 30*time.Second, "how often to renew the registration (with --register)")
	f.DurationVar(&o.reg.leaseLength, "lease-duration", 90*time.Second, "how long the registry keeps the shard without a renewal (with --register)")
	f.StringVar(&o.reg.credential, "credential", "", "the credential proxies' own calls to this shard carry, by the name their configuration gives it (with --register)")
	f.StringVar(&o.auth.Mode, "auth", authn.ModeNone, "what every gRPC and REST call must carry: none, oidc (a JWT of --issuer for --audience) or basic (--basic-user and --basic-password-file)")
	f.StringVar(&o.auth.Issuer, "issuer", "", "with --auth oidc: the OpenID Connect issuer URL whose keys sign the tokens")
	f.StringVar(&o.auth.Audience, "audience", "", "with --auth oidc: what a token's aud must hold (Camunda's is zeebe-api)")
	f.StringVar(&o.auth.IssuerCA, "issuer-ca", "", "with --auth oidc: CA file the issuer's certificate is checked against (default: the system's roots)")
	f.StringVar(&o.auth.Username, "basic-user", "", "with --auth basic: the user let in")
	f.StringVar(&o.auth.PasswordFile, "basic-password-file", "", "with --auth basic: file with its password (read again when it changes)")
	f.StringVar(&o.reg.tokenFile, "registry-token-file", "", "file with the bearer token the registry wants for writes (env "+cmdutil.EnvRegistryToken+")")
	o.logs.addFlags(cmd)
	return cmd
}

func (o *SimServeOptions) Complete(*cobra.Command, []string) error { return nil }

func (o *SimServeOptions) Validate() error {
	v, err := sim.ParseVersion(o.version)
	if err != nil {
		return fmt.Errorf("--zeebe-version: %w", err)
	}
	o.cfg.Version = v
	for _, t := range o.cfg.PhysicalTenants {
		if err := physicaltenant.Check(t); err != nil {
			return fmt.Errorf("--physical-tenants: %w", err)
		}
	}
	if err := o.tls.validate(); err != nil {
		return err
	}
	if err := o.logs.validate(); err != nil {
		return err
	}
	listen := map[string]string{"--listen": o.cfg.Listen, "--metrics": o.cfg.MetricsListen}
	if o.cfg.RESTListen != "" {
		listen["--rest-listen"] = o.cfg.RESTListen
	}
	if err := checkListenFlags(listen); err != nil {
		return err
	}
	if o.cfg.Partitions < 1 || o.cfg.Partitions > keyslot.MaxPartitions {
		return fmt.Errorf("--partitions %d: want 1 to %d", o.cfg.Partitions, keyslot.MaxPartitions)
	}
	if o.cfg.Capacity < 0 {
		return fmt.Errorf("--capacity %v: want 0 (unlimited) or a positive rate", o.cfg.Capacity)
	}
	if o.cfg.BacklogLimit == 0 || o.cfg.BacklogLimit < -1 {
		return fmt.Errorf("--backlog-limit %d: want a positive count, or -1 for no limit", o.cfg.BacklogLimit)
	}
	if o.cfg.QueryHistory < 1 {
		return fmt.Errorf("--query-history %d: want a positive count", o.cfg.QueryHistory)
	}
	if o.cfg.DegradeThreshold < 1 {
		return fmt.Errorf("--degrade-threshold %d: want a positive count", o.cfg.DegradeThreshold)
	}
	if !(o.cfg.DegradeMax >= 1) {
		return fmt.Errorf("--degrade-max %v: want at least 1", o.cfg.DegradeMax)
	}
	if o.cfg.TimerInterval <= 0 || o.shutdownTimeout < 0 {
		return fmt.Errorf("--timer-interval must be positive and --shutdown-timeout not negative")
	}
	if o.reg.url == "" {
		if o.reg.shardID != "" || o.reg.pool != "" || o.reg.slot != 0 || o.reg.credential != "" {
			return fmt.Errorf("--shard-id, --pool, --slot and --credential describe the registration: add --register URL")
		}
		return nil
	}
	o.reg.status = strings.ToUpper(o.reg.status)
	if st := registryapi.Status(o.reg.status); st != registryapi.StatusUp && st != registryapi.StatusOutOfService {
		return fmt.Errorf("--status %q: want UP or OUT_OF_SERVICE", o.reg.status)
	}
	if o.reg.slot < 0 || o.reg.slot > 31 {
		return fmt.Errorf("--slot %d: want 1-31, or 0 to let the registry assign one", o.reg.slot)
	}
	if o.reg.renewal < time.Second || o.reg.leaseLength <= o.reg.renewal {
		return fmt.Errorf("--renewal-interval %v, --lease-duration %v: want at least 1s, and a lease longer than the interval", o.reg.renewal, o.reg.leaseLength)
	}
	return nil
}

func (o *SimServeOptions) Run(ctx context.Context) error {
	tlsServer, err := o.tls.server(o.g.Streams.ErrOut)
	if err != nil {
		return err
	}
	o.cfg.TLS = tlsServer
	if o.cfg.Auth, err = authn.New(o.auth); err != nil {
		return cmdutil.UsageError(err)
	}
	errOut := o.g.Streams.ErrOut
	log, held := o.logs.logger(errOut)
	defer held.Open()
	o.cfg.Logger = log
	s, err := sim.New(o.cfg)
	if err != nil {
		return err
	}
	if err := s.Start(ctx); err != nil {
		return err
	}
	more := []string{fmt.Sprintf("metrics on http://%s/metrics", s.MetricsAddr())}
	if a := s.RESTAddr(); a != nil {
		more = append(more, restLine(a, o.cfg.TLS != nil))
	}
	announce(errOut, held, s.Addr(), more...)
	stopHeartbeat := func() {}
	if o.reg.url != "" {
		rest := ""
		if a := s.RESTAddr(); a != nil {
			rest = o.restURL(a.String())
		}
		if stopHeartbeat, err = o.startHeartbeat(ctx, s.Addr().String(), s.MetricsAddr().String(), rest); err != nil {
			_ = s.Close(context.Background())
			return err
		}
	}
	return serveUntilDone(ctx, errOut, "simulator", o.shutdownTimeout, nil, func(ctx context.Context) error {
		stopHeartbeat() // leave the registry first, so no new work arrives
		return s.Close(ctx)
	})
}

// startHeartbeat registers the simulator and renews it until stopped;
// stopping deregisters it.
func (o *SimServeOptions) startHeartbeat(ctx context.Context, gateway, metrics, rest string) (func(), error) {
	c, err := o.g.RegistryClient(o.reg.url, o.reg.tokenFile)
	if err != nil {
		return nil, err
	}
	addr := o.reg.advertise
	if addr == "" {
		addr = gateway
	}
	id := o.reg.shardID
	if id == "" {
		_, port, _ := net.SplitHostPort(addr)
		id = "sim-" + port
	}
	in, err := registryapi.NewShardInstance(registryapi.ShardRegistration{
		App: o.reg.app, ID: id, Address: addr, Pool: o.reg.pool, Slot: o.reg.slot,
		Metrics: "http://" + metrics + "/metrics", REST: rest, PhysicalTenants: o.cfg.PhysicalTenants, RenewalInterval: o.reg.renewal, LeaseDuration: o.reg.leaseLength,
		Status: registryapi.Status(o.reg.status), TLS: o.registeredTLS(), Credential: o.reg.credential,
	})
	if err != nil {
		return nil, cmdutil.UsageError(err)
	}
	errOut := o.g.Streams.ErrOut
	hbCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Heartbeat(hbCtx, in, func(err error) {
			if err != nil {
				fmt.Fprintf(errOut, "registry: %v (retrying)\n", err)
				return
			}
			fmt.Fprintf(errOut, "registered as shard %s (app %s, pool %q) at %s\n", id, in.App, o.reg.pool, o.reg.url)
		})
	}()
	return func() { cancel(); <-done }, nil
}

// registeredTLS tells proxies how to reach a simulator serving TLS: its
// certificate checked against their --upstream-ca.
func (o *SimServeOptions) registeredTLS() string {
	if o.tls.cert == "" {
		return ""
	}
	return "true"
}

// restURL is the REST API's base URL as the registry should publish it:
// the advertised host, when there is one, with the port the API bound.
func (o *SimServeOptions) restURL(bound string) string {
	host, port, _ := net.SplitHostPort(bound)
	if o.reg.advertise != "" {
		if h, _, err := net.SplitHostPort(o.reg.advertise); err == nil {
			host = h
		}
	}
	scheme := "http"
	if o.tls.cert != "" {
		scheme = "https"
	}
	return scheme + "://" + net.JoinHostPort(host, port)
}
