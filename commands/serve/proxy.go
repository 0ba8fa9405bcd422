package serve

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/shardctl/shardctl/commands/cmdutil"
	"github.com/shardctl/shardctl/internal/procs"
	"github.com/shardctl/shardctl/internal/proxy"
	"github.com/shardctl/shardctl/internal/proxy/queries"
	"github.com/shardctl/shardctl/internal/proxy/route"
	"github.com/shardctl/shardctl/internal/registry/registryapi"
	"github.com/shardctl/shardctl/internal/registry/registryclient"
	"github.com/shardctl/shardctl/internal/restgateway"
)

// NewCmdProxy builds `shardctl proxy`.
func NewCmdProxy(g *cmdutil.Globals) *cobra.Command {
	return newRuntimeGroup("proxy", "Run the federation proxy: several Zeebe clusters behind one gateway address",
		`The federation proxy serves the Zeebe gateway API (8.5 to 8.10) and spreads one workload
over several Zeebe clusters (shards); clients keep one gateway address and
change nothing. See "shardctl proxy serve --help".`,
		newCmdProxyServe(g))
}

// ProxyServeOptions runs the proxy until SIGTERM/SIGINT.
type ProxyServeOptions struct {
	g               *cmdutil.Globals
	configFile      string
	shardFlags      []string
	cfg             proxy.Config
	coolingOff      time.Duration
	shutdownTimeout time.Duration
	tls             tlsFiles
	adminTLS        tlsFiles
	// cred is the --shard-* flags: the proxy's "default" credential.
	cred      cmdutil.CredentialFlags
	sizeProcs bool
	// registry mode: shards, states and the ledger come from the registry
	app, tokenFile string
	registry       *registryclient.Client
	logs           logFlags
}

func newCmdProxyServe(g *cmdutil.Globals) *cobra.Command {
	o := &ProxyServeOptions{g: g}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the Zeebe gateway API in front of several shards",
		Long: `Serve the Zeebe gateway API (gRPC) on --listen in front of the shards,
with --rest-listen the REST API (/v2, Camunda 8.8's command endpoints)
too, and /metrics, /healthz, /readyz and GET /shards on --admin. The first
line on stderr is "listening on HOST:PORT", the second "admin on
http://HOST:PORT/shards", with --rest-listen the third "REST API on
http://HOST:PORT/v2"; then come log lines, one per state change (a
shard added, DOWN or back, ejected, replayed, drained; weights changed;
admission refusing a shard), as --log-format says.

Routing (the federation contract), the same for both protocols: a REST
call becomes the gRPC call a Zeebe gateway makes for it (its keys are the
same keys, as strings; a shard's refusal is 503 RESOURCE_EXHAUSTED; the
Authorization header and 8.10's /physical-tenants/{id}/v2 prefix reach
the shard as gRPC metadata):
  - every key the proxy returns carries the shard's slot (1-31) in bits 58-62;
    a key without one belongs to --legacy-shard (NOT_FOUND without one);
  - deployments go to every shard in slot order and into the deployment
    ledger; a shard added later is replayed the ledger first;
  - new instances go to one shard by power-of-two-choices on requests in
    flight, skipping shards not UP, DOWN, ejected, overloaded (over
    --overload-limit plus --overload-excess, until back under the limit),
    at --max-inflight-per-shard, or cooling off for --cooling-off after a
    RESOURCE_EXHAUSTED; a request is tried once per shard at most; when
    every shard refuses, the client gets RESOURCE_EXHAUSTED at once; an
    ambiguous failure is never retried;
  - a call to a shard with --max-inflight-per-shard requests in flight
    gets RESOURCE_EXHAUSTED at once, never queued (Topology excepted);
  - a shard with a metrics URL (metrics= in --shard, or its registration's
    metrics) is paced by its queue and refused over --max-backlog (see
    Admission below);
  - every --health-interval a Topology call checks each shard:
    --unhealthy-after failures in a row (or a refused connection) hold it
    DOWN, so calls for its keys fail at once with UNAVAILABLE naming it;
    --healthy-after good checks bring it back once the ledger is replayed
    to it; --outlier-failures failures in a row on real traffic eject it
    from placement for --ejection-time, longer each time, never more than
    --max-ejection-percent of the shards;
  - jobs are collected from every UP and DRAINING shard; jobs the worker
    cannot take are handed back at once (FailJob, retries unchanged, no
    backoff);
  - key-addressed calls go to the key's shard;
  - EvaluateConditional (8.9) starts instances: placed as a new instance,
    or sent to the shard of the process definition key it names; a method
    the proxy does not know is refused with UNIMPLEMENTED naming it;
  - a message whose name starts a process (per the ledger) goes to one
    shard and starts one instance; any other message goes to every UP and
    DRAINING shard, so a waiting instance correlates wherever it lives.
    A name used both to start a process and to be caught is therefore sent
    to one shard only: instances waiting for it on other shards do not get
    it. Give start and catch messages different names.
  - signals go to every shard;
  - REST searches (POST /v2/<resource>/search) go to every shard that may
    hold matches over its REST API (rest= in --shard, or its
    registration's rest), within --search-timeout, and are merged by the
    requested sort into one page; a cursor is a position, not an offset,
    so a page continues every shard where the last ended; a get by key
    (GET /v2/<resource>/{key}) goes to the key's shard. A shard that does
    not answer fails the search with 503 naming it, or, with
    --search-partial, is left out of an answer marked
    Shardctl-Partial-Result: missing=ID.
  - 8.10 physical tenants (the Camunda-Physical-Tenant header, the
    /physical-tenants/{id}/v2 prefix; none is "default"): everything
    above happens among the shards that serve the request's tenant
    (tenant= in --shard, or its registration's physicalTenants; none
    listed: default only), deployments are replayed in their tenant to its
    shards only, and a tenant no shard serves is NOT_FOUND naming it.

On SIGTERM or SIGINT: /readyz answers 503 and the proxy leaves the
registry; after --shutdown-delay it accepts no new calls; open long polls
end (with no jobs) and job streams end (UNAVAILABLE, which the Zeebe client
retries) --drain-batch a second, handing back the jobs they buffered;
in-flight calls finish; all within --shutdown-timeout.

Shards come from --shard flags or --config, or, when neither is given and
--registry (env SHARDCTL_REGISTRY) is, from the registry's --app: the proxy
watches it and follows every change within a second (a new shard is
replayed the ledger before it takes instances; DRAINING and OUT_OF_SERVICE
stop new instances; a shard that leaves the registry stays as DOWN), and
keeps the deployment ledger there, shared by every proxy replica.

Admission: every --backlog-interval the proxy reads each shard's queue
from its metrics: how long its records wait to be processed (the stream
processor's latency, or the records left unprocessed at the rate it
processes them), and how much longer than working one its jobs wait for
their workers (held to four targets). Over --queue-target the shard is
paced: new instances at most at the rate that brings its queue back to
the target (what it processes over the records an instance writes), or,
held by its workers, at the rate instances complete; the rest are
refused with RESOURCE_EXHAUSTED (503) at once, or go to a shard with
room. Instances that wait on purpose (timers, user tasks, messages)
write nothing while they wait and are not a queue. A shard once
saturated is never offered more than 1.1 times what it processed then,
so a sudden step does not push it past its knee before the next reading.
Pacing ends after three readings under half the target with nothing
refused. --instance-limit N caps a congested shard's root instances in
flight at N instead; -1 turns both off. Over --max-backlog records, or
growing linearly, a shard gets nothing new until back under half.

Threads: with --size-procs (the default) Go code runs on as few threads as
the load needs: one while the proxy uses little CPU, all of GOMAXPROCS
(the environment's, else the CPUs it may use) once those it has are over
60% busy, one fewer after 2 s under 30% of one fewer. On a lightly loaded
proxy, idle threads waking each other cost more CPU than they serve.

--config FILE is YAML; a flag given beside it wins. Every field, with its
flag: listen (--listen), restListen (--rest-listen), searchTimeout, searchPartial, admin (--admin), front, legacyShard,
maxInflightPerShard, overloadLimit, overloadExcess, maxBacklog,
instanceLimit, queueTarget, backlogInterval, coolingOff, deployTimeout, health (interval, timeout,
unhealthyAfter, healthyAfter, outlierFailures, ejectionTime,
maxEjectionPercent), clients (maxConnections, handshakeTimeout,
idleTimeout, keepAlive, resetBudget, cooldown, outputLimit: the --max-client-connections and
--client-* flags), tls (cert, key, clientCA), upstreamCA, registryCA,
registryCert, registryKey (--registry-ca and its kin), credentials, and
shards, a list of {id, address, slot, state, pool, metrics, rest, tls,
credential, physicalTenants}.

Credentials. Clients' calls carry the client's own Authorization to the
shard. The proxy's own calls (health checks, ledger replays, jobs handed
back) carry the credential the shard names (credential=, or its
registry metadata), else the one named "default" (the --shard-* flags):
credentials: is a map of names to {tokenFile} (a bearer token), {username,
passwordFile} (Basic) or {tokenURL, clientID, clientSecretFile, audience,
scopes, tokenCA} (OAuth 2 client credentials, refreshed before expiry).
Secrets are read from files, again when they change. A shard that
refuses the proxy's credential is not DOWN: /shards says so under
health.auth; while a ledger replay it needs is refused, it takes no new
work. A --shard without slot= gets its place among the
--shard flags as its slot; tenant= may be given several times:

  listen: 127.0.0.1:26500
  admin: 127.0.0.1:9700
  maxBacklog: 1000
  health: {interval: 2s, unhealthyAfter: 2}
  shards:
  - {id: blue-0, address: 10.0.0.5:26500, slot: 1}
  - {id: green-1, address: 10.0.1.5:26500, slot: 2, state: DRAINING, tls: "true", physicalTenants: [default, acme]}
  credentials:
    default: {tokenURL: https://login.example/oauth/token, clientID: shardctl, clientSecretFile: /etc/shardctl/secret, audience: zeebe-api}`,
		Example: `  shardctl proxy serve --listen 127.0.0.1:26500 --admin 127.0.0.1:9700 \
      --shard blue=127.0.0.1:26501 --shard green=127.0.0.1:26502,slot=2

  # from a file (its fields above); flags override it
  shardctl proxy serve --config proxy.yaml

  # shards, their states and the deployment ledger from the registry, live
  shardctl proxy serve --registry http://127.0.0.1:8761/eureka --app ZEEBE-SHARDS`,
		Args:              cobra.NoArgs,
		ValidArgsFunction: cobra.NoFileCompletions,
		RunE:              cmdutil.RunOptions(o),
	}
	f := cmd.Flags()
	f.StringVar(&o.configFile, "config", "", "YAML configuration file (its fields: see above); a flag given beside it wins")
	f.StringVar(&o.cfg.Listen, "listen", "127.0.0.1:26500", "gateway address for clients, HOST:PORT")
	f.StringVar(&o.cfg.RESTListen, "rest-listen", "", "serve the REST API (/v2, Camunda 8.8's default client protocol) on HOST:PORT too, over the same routing (off by default)")
	f.DurationVar(&o.cfg.SearchTimeout, "search-timeout", queries.DefaultTimeout, "how long a REST search or get may wait for the shards (with --rest-listen)")
	f.BoolVar(&o.cfg.SearchPartial, "search-partial", false, "answer a REST search from the shards that answered when some did not, marked in the "+restgateway.PartialHeader+" header (default: 503 naming them)")
	f.StringVar(&o.cfg.AdminListen, "admin", "127.0.0.1:9700", "address of /metrics, /healthz, /readyz and /shards, HOST:PORT")
	f.StringVar(&o.cfg.Front, "front", route.DefaultFront, "how clients are served: "+route.FrontFrames+" (HTTP/2 of its own, calls forwarded as frames) or "+route.FrontGRPC+" (grpc-go, the fallback)")
	f.StringArrayVar(&o.shardFlags, "shard", nil, "a shard as ID=HOST:PORT[,slot=N][,state=S][,pool=P][,metrics=URL][,rest=URL][,tls=true|insecure][,tenant=NAME]... (repeatable; see above)")
	f.StringVar(&o.cfg.LegacyShard, "legacy-shard", "", "shard that keys without a slot (from before the cutover) belong to")
	f.Int64Var(&o.cfg.MaxInflightPerShard, "max-inflight-per-shard", route.DefaultMaxInflightPerShard, "the most requests in flight to one shard: past it a call gets RESOURCE_EXHAUSTED at once, never queued (0: no limit)")
	f.Int64Var(&o.cfg.OverloadLimit, "overload-limit", route.DefaultOverloadLimit, "requests in flight under which an overloaded shard takes new instances again (negative: never overloaded)")
	f.Int64Var(&o.cfg.MaxBacklog, "max-backlog", route.DefaultMaxBacklog, "records not processed past which a shard gets no new instances, read from its metrics (negative: off)")
	f.Int64Var(&o.cfg.InstanceLimit, "instance-limit", route.InstanceLimitAuto, "0 paces a shard's new instances by its queue; N caps a congested shard's root instances in flight at N instead; -1 neither (see Admission)")
	f.DurationVar(&o.cfg.QueueTarget, "queue-target", route.DefaultQueueTarget, "the time a shard's records may wait to be processed before its new instances are paced (see Admission)")
	f.DurationVar(&o.cfg.BacklogInterval, "backlog-interval", route.DefaultBacklogInterval, "how often each shard's backlog is read from its metrics")
	f.IntVar(&o.cfg.OverloadExcess, "overload-excess", route.DefaultOverloadExcess, "percent over --overload-limit past which a shard is overloaded: no new instances")
	f.DurationVar(&o.cfg.DeployTimeout, "deploy-timeout", route.DefaultDeployTimeout, "how long a deployment may take on each shard: one that has not taken it by then catches up from the ledger, and the client hears which")
	f.DurationVar(&o.coolingOff, "cooling-off", route.DefaultCoolingOff, "how long a shard that answered RESOURCE_EXHAUSTED gets no new instances")
	f.DurationVar(&o.cfg.Health.Interval, "health-interval", route.DefaultHealthInterval, "how often each shard's health is checked with a Topology call (negative: never)")
	f.DurationVar(&o.cfg.Health.Timeout, "health-timeout", route.DefaultHealthTimeout, "how long one health check may take (at most --health-interval)")
	f.IntVar(&o.cfg.Health.UnhealthyAfter, "unhealthy-after", route.DefaultUnhealthyAfter, "failed health checks in a row that mark a shard DOWN")
	f.IntVar(&o.cfg.Health.HealthyAfter, "healthy-after", route.DefaultHealthyAfter, "good health checks in a row that bring a DOWN shard back (after the ledger is replayed to it)")
	f.IntVar(&o.cfg.Health.OutlierFailures, "outlier-failures", route.DefaultOutlierFailures, "failures in a row on real traffic (unavailable, the shard's timeout) that eject a shard from placement (negative: never)")
	f.DurationVar(&o.cfg.Health.EjectionTime, "ejection-time", route.DefaultEjectionTime, "how long a first ejection lasts; each further one lasts that much longer (at most 10 times)")
	f.IntVar(&o.cfg.Health.MaxEjectionPercent, "max-ejection-percent", route.DefaultMaxEjectionPercent, "the most shards ejected at once, in percent of all (1-100; --outlier-failures -1 turns ejection off)")
	f.DurationVar(&o.cfg.ShutdownDelay, "shutdown-delay", 5*time.Second, "on SIGTERM, how long to keep serving after /readyz turns 503, for endpoints to update")
	f.IntVar(&o.cfg.DrainBatch, "drain-batch", 50, "on SIGTERM, how many long polls and job streams to end a second, so workers reconnect elsewhere a few at a time (0: all at once)")
	f.DurationVar(&o.shutdownTimeout, "shutdown-timeout", 30*time.Second, "on SIGTERM, how long the whole stop may take (delay, stream drain, in-flight calls) before what is left is cut")
	f.IntVar(&o.cfg.ConnsPerShard, "conns-per-shard", 0, "HTTP/2 connections to each shard (0: enough for --max-inflight-per-shard calls at the concurrent streams the shard advertises, at most 16)")
	f.DurationVar(&o.cfg.StreamStallTimeout, "stream-stall-timeout", route.DefaultStreamStallTimeout, "how long a job stream's worker may read nothing while a job waits for it: then the stream ends with RESOURCE_EXHAUSTED and its jobs go back to other workers")
	f.IntVar(&o.cfg.Clients.MaxConns, "max-client-connections", route.DefaultMaxClientConns, "the most client connections served at once: one past it is sent GOAWAY and closed (negative: no cap; frame front)")
	f.DurationVar(&o.cfg.Clients.HandshakeTimeout, "client-handshake-timeout", route.DefaultClientHandshakeTimeout, "how long a client connection may take to finish its TLS and HTTP/2 handshake before it is closed (negative: no limit)")
	f.DurationVar(&o.cfg.Clients.IdleTimeout, "client-idle-timeout", route.DefaultClientIdleTimeout, "a client connection with no call for this long is sent GOAWAY; the client reconnects for its next call (negative: never)")
	f.DurationVar(&o.cfg.Clients.KeepAlive, "client-keepalive", route.DefaultClientKeepAlive, "a client connection quiet this long is pinged, and closed if no answer comes in 20s (negative: no pings)")
	f.DurationVar(&o.cfg.Clients.Cooldown, "client-cooldown", route.DefaultClientCooldown, "after a client connection is cut off (resets, no handshake), new ones from its address are held a second unanswered and closed, for this long (negative: off)")
	f.IntVar(&o.cfg.Clients.OutputLimit, "client-output-limit", route.DefaultClientOutputLimit, "bytes of answers a client connection may have waiting for it to read; past it, its new calls are refused (REFUSED_STREAM) until it reads (negative: none)")
	f.IntVar(&o.cfg.Clients.ResetBudget, "client-reset-budget", route.DefaultClientResetBudget, "how many more calls a connection may cancel before their answer than it completes (refilled over 10s); past it: GOAWAY (negative: off)")
	f.BoolVar(&o.cfg.Profiling, "profiling", false, "serve Go's /debug/pprof on the admin address")
	f.StringVar(&o.adminTLS.cert, "admin-tls-cert", "", "serve the admin address over https with this certificate (with --admin-tls-key; read again when it changes)")
	f.StringVar(&o.adminTLS.key, "admin-tls-key", "", "private key of --admin-tls-cert")
	f.StringVar(&o.cfg.AdminTokenFile, "admin-token-file", "", "file with the bearer token GET /shards and /debug/pprof want; /metrics, /healthz and /readyz stay open")
	f.BoolVar(&o.sizeProcs, "size-procs", true, "run Go code on as few threads as the load needs (see Threads above; false: always GOMAXPROCS)")
	f.StringVar(&o.app, "app", registryapi.DefaultShardsApp, "registry application of the shards (registry mode)")
	f.StringVar(&o.cfg.ID, "proxy-id", "", "the id this proxy registers as in "+registryapi.ProxiesApp+" (registry mode; default HOSTNAME-PORT)")
	f.StringVar(&o.tokenFile, "registry-token-file", "", "file with the bearer token the registry wants for writes (env "+cmdutil.EnvRegistryToken+")")
	o.tls.addFlags(f, "clients")
	f.StringVar(&o.tls.clientCA, "tls-client-ca", "", "CA file client certificates must be signed by: clients without one are refused (read again when it changes)")
	f.StringVar(&o.cfg.UpstreamCA, "upstream-ca", "", "CA file the certificates of shards with tls=true are checked against (default: the system's roots)")
	o.cred.AddFlags(f)
	o.logs.addFlags(cmd)
	return cmd
}

func (o *ProxyServeOptions) Complete(cmd *cobra.Command, _ []string) error {
	if o.configFile != "" {
		fc, err := route.LoadFile(o.configFile)
		if err != nil {
			return err
		}
		// The file's value, unless the flag was given or the file leaves
		// it out (LoadFile checked every duration).
		flags := cmd.Flags()
		str := func(flag, v string, dst *string) {
			if v != "" && !flags.Changed(flag) {
				*dst = v
			}
		}
		dur := func(flag, v string, dst *time.Duration) {
			if v != "" && !flags.Changed(flag) {
				*dst, _ = time.ParseDuration(v)
			}
		}
		str("listen", fc.Listen, &o.cfg.Listen)
		str("rest-listen", fc.RESTListen, &o.cfg.RESTListen)
		dur("search-timeout", fc.SearchTimeout, &o.cfg.SearchTimeout)
		fromFile(flags, "search-partial", fc.SearchPartial, &o.cfg.SearchPartial)
		str("admin", fc.Admin, &o.cfg.AdminListen)
		str("front", fc.Front, &o.cfg.Front)
		str("legacy-shard", fc.LegacyShard, &o.cfg.LegacyShard)
		fromFile(flags, "max-inflight-per-shard", fc.MaxInflightPerShard, &o.cfg.MaxInflightPerShard)
		fromFile(flags, "overload-limit", fc.OverloadLimit, &o.cfg.OverloadLimit)
		fromFile(flags, "overload-excess", fc.OverloadExcess, &o.cfg.OverloadExcess)
		fromFile(flags, "max-backlog", fc.MaxBacklog, &o.cfg.MaxBacklog)
		fromFile(flags, "instance-limit", fc.InstanceLimit, &o.cfg.InstanceLimit)
		dur("backlog-interval", fc.BacklogInterval, &o.cfg.BacklogInterval)
		dur("queue-target", fc.QueueTarget, &o.cfg.QueueTarget)
		dur("cooling-off", fc.CoolingOff, &o.coolingOff)
		dur("deploy-timeout", fc.DeployTimeout, &o.cfg.DeployTimeout)
		h := fc.Health
		dur("health-interval", h.Interval, &o.cfg.Health.Interval)
		dur("health-timeout", h.Timeout, &o.cfg.Health.Timeout)
		dur("ejection-time", h.EjectionTime, &o.cfg.Health.EjectionTime)
		fromFile(flags, "unhealthy-after", h.UnhealthyAfter, &o.cfg.Health.UnhealthyAfter)
		fromFile(flags, "healthy-after", h.HealthyAfter, &o.cfg.Health.HealthyAfter)
		fromFile(flags, "outlier-failures", h.OutlierFailures, &o.cfg.Health.OutlierFailures)
		fromFile(flags, "max-ejection-percent", h.MaxEjectionPercent, &o.cfg.Health.MaxEjectionPercent)
		str("tls-cert", fc.TLS.Cert, &o.tls.cert)
		str("tls-key", fc.TLS.Key, &o.tls.key)
		str("tls-client-ca", fc.TLS.ClientCA, &o.tls.clientCA)
		str("admin-tls-cert", fc.AdminTLS.Cert, &o.adminTLS.cert)
		str("admin-tls-key", fc.AdminTLS.Key, &o.adminTLS.key)
		str("admin-token-file", fc.AdminTokenFile, &o.cfg.AdminTokenFile)
		str("upstream-ca", fc.UpstreamCA, &o.cfg.UpstreamCA)
		str("registry-ca", fc.RegistryCA, &o.g.RegistryCA)
		str("registry-cert", fc.RegistryCert, &o.g.RegistryCert)
		str("registry-key", fc.RegistryKey, &o.g.RegistryKey)
		cl := fc.Clients
		fromFile(flags, "max-client-connections", cl.MaxConnections, &o.cfg.Clients.MaxConns)
		dur("client-handshake-timeout", cl.HandshakeTimeout, &o.cfg.Clients.HandshakeTimeout)
		dur("client-idle-timeout", cl.IdleTimeout, &o.cfg.Clients.IdleTimeout)
		dur("client-keepalive", cl.KeepAlive, &o.cfg.Clients.KeepAlive)
		fromFile(flags, "client-reset-budget", cl.ResetBudget, &o.cfg.Clients.ResetBudget)
		dur("client-cooldown", cl.Cooldown, &o.cfg.Clients.Cooldown)
		fromFile(flags, "client-output-limit", cl.OutputLimit, &o.cfg.Clients.OutputLimit)
		o.cfg.Shards = append(o.cfg.Shards, fc.Shards...)
		o.cfg.Credentials = fc.Credentials
	}
	creds, err := o.cred.Add(o.cfg.Credentials)
	if err != nil {
		return err
	}
	o.cfg.Credentials = creds
	for _, v := range o.shardFlags {
		sc, err := route.ParseShardFlag(v, len(o.cfg.Shards)+1)
		if err != nil {
			return cmdutil.UsageError(err)
		}
		o.cfg.Shards = append(o.cfg.Shards, sc)
	}
	o.cfg.CoolingOff = o.coolingOff
	if len(o.cfg.Shards) == 0 && o.g.RegistryNamed() {
		c, err := o.g.RegistryClient("", o.tokenFile)
		if err != nil {
			return err
		}
		o.registry = c
		o.cfg.Dynamic = true
		o.cfg.Ledger = registryclient.Ledger{C: c}
	}
	return nil
}

// fromFile sets dst to a number the configuration file gives (v not nil),
// unless its flag was given.
func fromFile[T any](flags *pflag.FlagSet, flag string, v *T, dst *T) {
	if v != nil && !flags.Changed(flag) {
		*dst = *v
	}
}

func (o *ProxyServeOptions) Validate() error {
	listen := map[string]string{"--listen": o.cfg.Listen, "--admin": o.cfg.AdminListen}
	if o.cfg.RESTListen != "" {
		listen["--rest-listen"] = o.cfg.RESTListen
	}
	if err := checkListenFlags(listen); err != nil {
		return err
	}
	if len(o.cfg.Shards) == 0 && o.registry == nil {
		return fmt.Errorf("no shards: name them with --shard ID=HOST:PORT or --config FILE, or take them from a registry with --registry URL")
	}
	if o.coolingOff <= 0 {
		return fmt.Errorf("--cooling-off %v: want a positive duration", o.coolingOff)
	}
	if f := o.cfg.Front; f != route.FrontFrames && f != route.FrontGRPC {
		return fmt.Errorf("--front %q: want %s or %s", f, route.FrontFrames, route.FrontGRPC)
	}
	if o.cfg.ShutdownDelay < 0 || o.cfg.DrainBatch < 0 {
		return fmt.Errorf("--shutdown-delay %v, --drain-batch %d: want neither negative", o.cfg.ShutdownDelay, o.cfg.DrainBatch)
	}
	if err := o.tls.validate(); err != nil {
		return err
	}
	if (o.adminTLS.cert == "") != (o.adminTLS.key == "") {
		return cmdutil.UsageError(errors.New("--admin-tls-cert and --admin-tls-key go together"))
	}
	if err := o.logs.validate(); err != nil {
		return err
	}
	if o.cfg.ShutdownDelay >= o.shutdownTimeout {
		return fmt.Errorf("--shutdown-delay %v leaves nothing of --shutdown-timeout %v to finish the calls in flight", o.cfg.ShutdownDelay, o.shutdownTimeout)
	}
	return nil
}

func (o *ProxyServeOptions) Run(ctx context.Context) error {
	cmdutil.CollectLessOften()
	if o.sizeProcs {
		defer procs.Start(procs.Config{}).Close()
	}
	errOut := o.g.Streams.ErrOut
	log, held := o.logs.logger(errOut)
	defer held.Open()
	o.cfg.Logger = log
	if o.registry != nil {
		o.cfg.Registry, o.cfg.App = o.registry, o.app
	}
	tlsServer, err := o.tls.server(errOut)
	if err != nil {
		return err
	}
	o.cfg.TLS = tlsServer
	if o.cfg.AdminTLS, err = o.adminTLS.server(errOut); err != nil {
		return err
	}
	o.cfg.OnDrain = func(ended, left int) {
		fmt.Fprintf(errOut, "stopping: ended %d long polls and job streams, %d left\n", ended, left)
	}
	p, err := proxy.New(o.cfg)
	if err != nil {
		return cmdutil.UsageError(err)
	}
	if err := p.Start(ctx); err != nil {
		return err
	}
	// Where the shards come from and each one added are log lines.
	more := []string{fmt.Sprintf("admin on %s/shards", p.AdminURL())}
	if a := p.RESTAddr(); a != nil {
		more = append(more, restLine(a, o.cfg.TLS != nil))
	}
	announce(errOut, held, p.Addr(), more...)
	return serveUntilDone(ctx, errOut, "proxy", o.shutdownTimeout, p.Failed(), p.Close)
}
