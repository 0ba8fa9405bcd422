package store

import (
	"cmp"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"

	"github.com/shardctl/shardctl/internal/logs"
)

// EmbeddedEtcd runs an etcd member inside the registry process, for small
// installations and tests: three registries, each with its member, are a
// three-member etcd cluster and three replicas.
type EmbeddedEtcd struct {
	// Dir holds the member's data; a member restarted on it rejoins with
	// what it had (the initial cluster is then not read again).
	Dir string
	// Name is the member's name in the cluster: the replica's id.
	Name string
	// ClientURL is where the member serves clients (the registry among
	// them); port 0 picks one.
	ClientURL string
	// PeerURL is where it talks to the other members; by default the one
	// InitialCluster gives its name.
	PeerURL string
	// InitialCluster is every member, NAME=PEER-URL,…; by default this
	// member alone.
	InitialCluster string
	// CertFile and KeyFile, when set, serve clients and peers over TLS
	// (https:// URLs) with a certificate for both ends (server and client
	// auth: the members dial each other with it); with CAFile, clients and
	// peers must show a certificate it signed, and peers are checked
	// against it.
	CertFile, KeyFile, CAFile string
	// MaxTxnOps is the member's --max-txn-ops (0: EmbeddedMaxTxnOps).
	MaxTxnOps int
	// Logger gets the member's lines of warn and above (nil: none).
	Logger *slog.Logger
}

// Default URLs of an embedded member, etcd's own.
const (
	DefaultEtcdClientURL = "http://127.0.0.1:2379"
	DefaultEtcdPeerURL   = "http://127.0.0.1:2380"
)

// EmbeddedMaxTxnOps is an embedded member's --max-txn-ops: a replica
// sends the writes waiting together as one transaction, and etcd's
// default (128) would cut a burst of registrations into many.
const EmbeddedMaxTxnOps = 4096

// EmbeddedMember is a started member.
type EmbeddedMember struct {
	e         *embed.Etcd
	ClientURL string
	once      sync.Once
}

// StartEmbeddedEtcd starts the member without waiting for its cluster:
// the members of a new cluster start together, and the registry waits for
// etcd as it would for a remote one.
func StartEmbeddedEtcd(c EmbeddedEtcd) (*EmbeddedMember, error) {
	if c.Dir == "" || c.Name == "" {
		return nil, fmt.Errorf("--embedded-etcd needs a data directory and the replica's --id")
	}
	if c.ClientURL == "" {
		c.ClientURL = DefaultEtcdClientURL
	}
	if c.PeerURL == "" {
		c.PeerURL = DefaultEtcdPeerURL
		for _, m := range strings.Split(c.InitialCluster, ",") {
			if name, u, ok := strings.Cut(strings.TrimSpace(m), "="); ok && name == c.Name {
				c.PeerURL = u
			}
		}
	}
	if c.InitialCluster == "" {
		c.InitialCluster = c.Name + "=" + c.PeerURL
	} else if !strings.Contains(","+c.InitialCluster, ","+c.Name+"=") {
		return nil, fmt.Errorf("--initial-cluster %q does not name this replica (%s)", c.InitialCluster, c.Name)
	}
	cu, err := url.Parse(c.ClientURL)
	if err != nil || cu.Host == "" {
		return nil, fmt.Errorf("etcd client URL %q: want http://HOST:PORT", c.ClientURL)
	}
	pu, err := url.Parse(c.PeerURL)
	if err != nil || pu.Host == "" {
		return nil, fmt.Errorf("etcd peer URL %q: want http://HOST:PORT", c.PeerURL)
	}
	cfg := embed.NewConfig()
	cfg.Name, cfg.Dir = c.Name, c.Dir
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = c.InitialCluster
	cfg.InitialClusterToken = "shardctl-registry"
	cfg.MaxTxnOps = uint(cmp.Or(c.MaxTxnOps, EmbeddedMaxTxnOps))
	if (c.CertFile == "") != (c.KeyFile == "") {
		return nil, fmt.Errorf("the embedded etcd member's certificate and key go together")
	}
	if c.CertFile != "" {
		if cu.Scheme != "https" || pu.Scheme != "https" {
			return nil, fmt.Errorf("an embedded etcd member serving TLS wants https:// client and peer URLs (%s, %s)", c.ClientURL, c.PeerURL)
		}
		tls := transport.TLSInfo{CertFile: c.CertFile, KeyFile: c.KeyFile, TrustedCAFile: c.CAFile, ClientCertAuth: c.CAFile != ""}
		cfg.ClientTLSInfo, cfg.PeerTLSInfo = tls, tls
	}
	// The digests of renewals are rewritten twice a second: keep ten
	// minutes of history, enough for a watch to catch up after a pause.
	cfg.AutoCompactionMode, cfg.AutoCompactionRetention = "periodic", "10m"
	// etcd logs every step of its start and close at info; its warnings
	// (a peer it cannot reach, a slow fsync, a disk filling up) and errors
	// reach the registry's log.
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(logs.Zap(c.Logger, slog.LevelWarn))
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("embedded etcd in %s: %w", c.Dir, err)
	}
	u := *cu
	if len(e.Clients) > 0 {
		u.Host = e.Clients[0].Addr().String() // the port picked, if 0
	}
	return &EmbeddedMember{e: e, ClientURL: u.String()}, nil
}

// Close stops the member; safe twice.
func (m *EmbeddedMember) Close() { m.once.Do(m.e.Close) }

// Err delivers what stopped the member while it ran (its server or a
// peer listener failing), once.
func (m *EmbeddedMember) Err() <-chan error { return m.e.Err() }

// LeaderChanged is closed when the member sees a new leader (the first
// one too); each call gives the channel of the next change.
func (m *EmbeddedMember) LeaderChanged() <-chan struct{} { return m.e.Server.LeaderChangedNotify() }
