package serve

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardctl/shardctl/commands/cmdutil"
	"github.com/shardctl/shardctl/internal/registry"
	"github.com/shardctl/shardctl/internal/registry/registryapi"
	"github.com/shardctl/shardctl/internal/registry/replica"
	"github.com/shardctl/shardctl/internal/registry/store"
)

// NewCmdRegistry builds `shardctl registry`.
func NewCmdRegistry(g *cmdutil.Globals) *cobra.Command {
	return newRuntimeGroup("registry", "Run the registry: the Eureka-compatible control plane of shards, pools and states",
		`The registry knows which shards exist, their address, slot, pool and state,
and keeps the deployment ledger. It speaks Netflix Eureka's REST API, so
Eureka clients register with it unchanged. See "shardctl registry serve --help".`,
		newCmdRegistryServe(g))
}

// RegistryServeOptions runs the registry until SIGTERM/SIGINT.
type RegistryServeOptions struct {
	g               *cmdutil.Globals
	cfg             registry.Config
	shutdownTimeout time.Duration
	coordinators    []string
	embedded        store.EmbeddedEtcd
	tls             tlsFiles
	logs            logFlags
}

func newCmdRegistryServe(g *cmdutil.Globals) *cobra.Command {
	o := &RegistryServeOptions{g: g}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the Eureka REST API, the watch stream and the deployment ledger",
		Long: `Serve the registry on --listen: Eureka's REST API under /eureka/apps and
/eureka/v2/apps (JSON or XML, gzip), shardctl's own API under /shardctl/v1
(shards, state, watch, ledger, status), and /metrics, /healthz, /readyz.
The first line on stderr is "listening on HOST:PORT", the second "eureka at
http://HOST:PORT/eureka, store STORE"; then come log lines, one per state
change (an instance registered, evicted or drained, self-preservation on
or off, a cutover record moved on, the coordinator changed), as
--log-format says.

Unlike Eureka: a lease ends at its last renewal + its duration (not twice
that), eviction runs every --eviction-interval, reads are served from a
snapshot rebuilt on every change, and GET /shardctl/v1/watch pushes changes
(server-sent events, or ?poll=1 for a long poll).

Self-preservation works as in Eureka: when fewer renewals than
--renewal-threshold x the expected number arrived in the last minute,
nothing is evicted (a network partition must not empty the registry). The
expected number follows every register, cancel and eviction.

Instances of --shards-app are shards: each gets a slot (1-31, metadata
"slot") that stays its own across re-registrations and restarts, until
"shardctl shards deregister --release-slot". Metadata "shardctl.static=true"
marks an instance registered by an operator: it never expires.

Several replicas share one registry over etcd (--store etcd:URL,URL, or
--embedded-etcd DIR to run an etcd member in each replica). Every replica
serves reads from memory, kept fresh by an etcd watch: a change made through
any replica shows on every replica within a second. Writes are etcd
transactions; renewals are not: each replica publishes the leases it renewed
twice a second, so a renewal sent to any replica keeps the lease. One
replica, the coordinator, elected through etcd, evicts; --coordinators names
the replicas preferred for it (any replica stands in while none of them is
alive). A replica cut off from etcd reports not ready, stops evicting, and
answers reads from what it saw last with the header Shardctl-Stale-Seconds.`,
		Example: `  shardctl registry serve --listen 127.0.0.1:8761 --store bolt:/var/lib/shardctl/registry.db

  # Eureka clients: service URL http://127.0.0.1:8761/eureka (or /eureka/v2)
  curl -H 'Accept: application/json' http://127.0.0.1:8761/eureka/apps

  # Three replicas, each with an etcd member (run one per machine, with its --id)
  shardctl registry serve --id a --embedded-etcd /var/lib/shardctl/etcd \
    --etcd-client-url http://10.0.0.1:2379 \
    --initial-cluster a=http://10.0.0.1:2380,b=http://10.0.0.2:2380,c=http://10.0.0.3:2380 \
    --coordinators a,b --listen 10.0.0.1:8761`,
		Args:              cobra.NoArgs,
		ValidArgsFunction: cobra.NoFileCompletions,
		RunE:              cmdutil.RunOptions(o),
	}
	f := cmd.Flags()
	f.StringVar(&o.cfg.Listen, "listen", "127.0.0.1:8761", "address of the REST API and /metrics, HOST:PORT")
	f.StringVar(&o.cfg.Store, "store", "memory", "where registrations and the ledger are kept: memory, bolt:PATH or etcd:URL[,URL] (shared by replicas)")
	f.StringVar(&o.cfg.Replica.ID, "id", "", "this replica's name among the replicas over etcd, and its etcd member's (default: the host name)")
	f.StringSliceVar(&o.coordinators, "coordinators", nil, "replicas preferred as coordinator (the one that evicts), ID,ID; any order; stored for every replica")
	f.DurationVar(&o.cfg.Replica.SessionTTL, "session-ttl", replica.DefaultSessionTTL, "etcd lease of a replica's membership and candidacy: how soon a replica that died hands over")
	f.StringVar(&o.cfg.EtcdPrefix, "etcd-prefix", store.DefaultEtcdPrefix, "where the registry keeps its keys in etcd")
	f.StringVar(&o.embedded.Dir, "embedded-etcd", "", "run an etcd member in this process, with its data in DIR, and keep the registry in it")
	f.StringVar(&o.embedded.InitialCluster, "initial-cluster", "", "the embedded members of a new cluster, NAME=PEER-URL,… (default: this one alone)")
	f.StringVar(&o.embedded.ClientURL, "etcd-client-url", "", "where the embedded member serves etcd clients (default "+store.DefaultEtcdClientURL+")")
	f.StringVar(&o.embedded.PeerURL, "etcd-peer-url", "", "where the embedded member talks to the others (default: its --initial-cluster entry, else "+store.DefaultEtcdPeerURL+")")
	f.StringVar(&o.cfg.EtcdLogin.CAFile, "etcd-ca", "", "CA file etcd's certificate is checked against (https:// etcd URLs; with --embedded-etcd: peers' and clients' too)")
	f.StringVar(&o.cfg.EtcdLogin.CertFile, "etcd-cert", "", "client certificate shown to etcd, with --etcd-key (read again when it changes)")
	f.StringVar(&o.cfg.EtcdLogin.KeyFile, "etcd-key", "", "private key of --etcd-cert")
	f.StringVar(&o.cfg.EtcdLogin.Username, "etcd-user", "", "etcd user the registry logs in as, with --etcd-password-file (etcd auth enabled: it then waits for etcd at start)")
	f.StringVar(&o.cfg.EtcdLogin.PasswordFile, "etcd-password-file", "", "file with the password of --etcd-user")
	f.StringVar(&o.embedded.CertFile, "etcd-member-cert", "", "serve the embedded member's clients and peers over TLS with this certificate (server and client auth), with --etcd-member-key")
	f.StringVar(&o.embedded.KeyFile, "etcd-member-key", "", "private key of --etcd-member-cert")
	f.DurationVar(&o.cfg.LeaseDuration, "lease-expiration", 90*time.Second, "lease duration of instances that do not give their own")
	f.DurationVar(&o.cfg.EvictionInterval, "eviction-interval", registry.DefaultEvictionInterval, "how often expired leases are evicted: a dead instance is gone within its lease plus this")
	f.BoolVar(&o.cfg.SelfPreservation, "self-preservation", true, "hold eviction while too few renewals arrive, as Eureka does")
	f.Float64Var(&o.cfg.RenewalThreshold, "renewal-threshold", 0.85, "share of expected renewals per minute below which self-preservation holds eviction")
	f.StringVar(&o.cfg.ShardsApp, "shards-app", registryapi.DefaultShardsApp, "application whose instances are shards (they get slots)")
	f.StringVar(&o.cfg.TokenFile, "token-file", "", "file holding a bearer token that writes must present")
	f.StringVar(&o.cfg.ReadTokenFile, "token-file-read", "", "file holding a bearer token that reads must present")
	f.DurationVar(&o.shutdownTimeout, "shutdown-timeout", 10*time.Second, "on SIGTERM, how long requests in flight may take to finish")
	o.tls.addFlags(f, "the registry")
	f.StringVar(&o.tls.clientCA, "tls-client-ca", "", "CA file client certificates must be signed by: clients without one are refused (read again when it changes)")
	o.logs.addFlags(cmd)
	return cmd
}

func (o *RegistryServeOptions) Complete(cmd *cobra.Command, _ []string) error {
	if cmd.Flags().Changed("coordinators") {
		o.cfg.Replica.Coordinators = append([]string{}, o.coordinators...)
	}
	if o.embedded.Dir != "" {
		o.embedded.CAFile = o.cfg.EtcdLogin.CAFile // peers and clients are checked against the same CA
		o.cfg.Embedded = &o.embedded
	}
	if o.cfg.Replica.ID == "" && (o.cfg.Embedded != nil || strings.HasPrefix(o.cfg.Store, "etcd:")) {
		host, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("--id: %w", err)
		}
		o.cfg.Replica.ID = host
	}
	return nil
}

func (o *RegistryServeOptions) Validate() error {
	if err := checkListenFlags(map[string]string{"--listen": o.cfg.Listen}); err != nil {
		return err
	}
	if err := o.logs.validate(); err != nil {
		return err
	}
	if err := o.tls.validate(); err != nil {
		return err
	}
	switch {
	case o.cfg.LeaseDuration < time.Second:
		return fmt.Errorf("--lease-expiration %v: want at least 1s", o.cfg.LeaseDuration)
	case o.cfg.EvictionInterval < 100*time.Millisecond:
		return fmt.Errorf("--eviction-interval %v: want at least 100ms", o.cfg.EvictionInterval)
	case o.cfg.RenewalThreshold <= 0 || o.cfg.RenewalThreshold > 1:
		return fmt.Errorf("--renewal-threshold %v: want a fraction in (0, 1]", o.cfg.RenewalThreshold)
	case o.cfg.Replica.SessionTTL < 2*time.Second:
		return fmt.Errorf("--session-ttl %v: want at least 2s (etcd leases count whole seconds)", o.cfg.Replica.SessionTTL)
	}
	return nil
}

func (o *RegistryServeOptions) Run(ctx context.Context) error {
	cmdutil.CollectLessOften()
	errOut := o.g.Streams.ErrOut
	log, held := o.logs.logger(errOut)
	defer held.Open()
	o.cfg.Logger = log
	tlsServer, err := o.tls.server(errOut)
	if err != nil {
		return err
	}
	o.cfg.TLS = tlsServer
	s, err := registry.New(o.cfg)
	if err != nil {
		return err
	}
	if err := s.Start(ctx); err != nil {
		return err
	}
	announce(errOut, held, s.Addr(), fmt.Sprintf("eureka at %s, store %s", s.URL(), s.Store()))
	return serveUntilDone(ctx, errOut, "registry", o.shutdownTimeout, s.Failed(), s.Close)
}
