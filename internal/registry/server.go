package registry

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/shardctl/shardctl/internal/certs"
	"github.com/shardctl/shardctl/internal/logs"
	"github.com/shardctl/shardctl/internal/registry/httpfront"
	"github.com/shardctl/shardctl/internal/registry/registryapi"
	"github.com/shardctl/shardctl/internal/registry/store"
)

// Config of a registry server.
type Config struct {
	Listen string
	// Store is memory, bolt:PATH or etcd:URL[,URL].
	Store string
	// EtcdPrefix is where an etcd store keeps the registry's keys.
	EtcdPrefix string
	// EtcdLogin is how an etcd store is reached: TLS, a user. A replica
	// dials its embedded member with the member's own certificate unless
	// it names another.
	EtcdLogin store.EtcdLogin
	// Embedded, if set, runs an etcd member in this process; the store is
	// then etcd through it, unless Store names another etcd.
	Embedded *store.EmbeddedEtcd
	Options
	// TokenFile and ReadTokenFile hold bearer tokens for writes and reads.
	TokenFile, ReadTokenFile string
	// TLS, when set, serves https (HTTP/2 and HTTP/1.1 for Eureka's
	// clients), its files read again when they change; with a client CA,
	// every client must show a certificate it signed.
	TLS *certs.Server
	// Logger gets the registry's, the replica's and the HTTP layer's
	// lines (Options.Logger, when set, the registry's and the replica's).
	Logger *slog.Logger
	// WatchKeepAlive is how often an idle watch stream gets a comment,
	// so that its clients can tell a quiet registry from a dead
	// connection (0: 15 s).
	WatchKeepAlive time.Duration
}

// Server is the registry runtime: New → Start → Addr → Close. It owns
// every goroutine it starts, and Close waits for them.
type Server struct {
	cfg    Config
	reg    *Registry
	http   *http.Server
	ln     net.Listener
	etcd   *store.EmbeddedMember
	wg     sync.WaitGroup // eviction, the HTTP server, the member's watch
	stop   chan struct{}  // closed by Close
	failed chan error     // what ended the listener or the member

	closeOnce sync.Once
	closeErr  error
}

// New checks the configuration and opens the store.
func New(cfg Config) (*Server, error) {
	if cfg.RenewalThreshold < 0 || cfg.RenewalThreshold > 1 {
		return nil, fmt.Errorf("renewal threshold %v: want a fraction between 0 and 1", cfg.RenewalThreshold)
	}
	writeToken, err := registryapi.ReadTokenFile(cfg.TokenFile)
	if err != nil {
		return nil, err
	}
	readTok, err := registryapi.ReadTokenFile(cfg.ReadTokenFile)
	if err != nil {
		return nil, err
	}
	var member *store.EmbeddedMember
	if cfg.Embedded != nil {
		if cfg.Store != "" && cfg.Store != "memory" && !strings.HasPrefix(cfg.Store, "etcd:") {
			return nil, fmt.Errorf("--embedded-etcd keeps the registry in etcd: --store %s does not go with it", cfg.Store)
		}
		if cfg.Embedded.Name == "" {
			cfg.Embedded.Name = cfg.Replica.ID
		}
		if cfg.Embedded.Logger == nil {
			cfg.Embedded.Logger = cfg.Logger
		}
		if member, err = store.StartEmbeddedEtcd(*cfg.Embedded); err != nil {
			return nil, err
		}
		if !strings.HasPrefix(cfg.Store, "etcd:") {
			cfg.Store = "etcd:" + member.ClientURL
			if cfg.Replica.MaxTxnOps == 0 {
				cfg.Replica.MaxTxnOps = cmp.Or(cfg.Embedded.MaxTxnOps, store.EmbeddedMaxTxnOps)
			}
			cfg.Replica.LeaderChanged = member.LeaderChanged
		}
	}
	fail := func(err error) (*Server, error) {
		if member != nil {
			member.Close()
		}
		return nil, err
	}
	if e := cfg.Embedded; e != nil && e.CertFile != "" && cfg.EtcdLogin.CertFile == "" {
		cfg.EtcdLogin.CertFile, cfg.EtcdLogin.KeyFile = e.CertFile, e.KeyFile
		cfg.EtcdLogin.CAFile = cmp.Or(cfg.EtcdLogin.CAFile, e.CAFile)
	}
	st, err := store.OpenStore(cfg.Store, cfg.EtcdPrefix, cfg.EtcdLogin)
	if err != nil {
		return fail(err)
	}
	if cfg.Options.Logger == nil {
		cfg.Options.Logger = cfg.Logger
	}
	cfg.Options.Store = st
	reg, err := NewRegistry(cfg.Options)
	if err != nil {
		st.Close()
		return fail(err)
	}
	s := &Server{cfg: cfg, reg: reg, etcd: member, stop: make(chan struct{}), failed: make(chan error, 2)}
	s.http = &http.Server{
		Handler:           httpfront.Handler(reg, httpfront.Options{WriteToken: writeToken, ReadToken: readTok, Logger: cfg.Logger, Metrics: httpfront.NewMetrics(reg), Heartbeat: cfg.WatchKeepAlive}),
		ReadHeaderTimeout: 10 * time.Second,
		MaxHeaderBytes:    64 << 10,
	}
	// Watch streams never go idle; they must end for Shutdown to finish.
	s.http.RegisterOnShutdown(reg.endWatches)
	return s, nil
}

// Start listens and serves; eviction runs until Close.
func (s *Server) Start(context.Context) error {
	ln, err := net.Listen("tcp", s.cfg.Listen)
	if err != nil {
		s.reg.Close()
		if s.etcd != nil {
			s.etcd.Close()
		}
		return fmt.Errorf("listen on %s: %w", s.cfg.Listen, err)
	}
	s.ln = ln
	s.wg.Go(s.reg.Run)
	if s.etcd != nil {
		s.wg.Go(func() {
			select {
			case err, ok := <-s.etcd.Err():
				if ok && err != nil {
					s.fail(fmt.Errorf("embedded etcd member %s: %w", s.cfg.Embedded.Name, err))
				}
			case <-s.stop:
			}
		})
	}
	serve := func() error { return s.http.Serve(ln) }
	if s.cfg.TLS != nil {
		s.http.TLSConfig = s.cfg.TLS.ConfigALPN("h2", "http/1.1")
		serve = func() error { return s.http.ServeTLS(ln, "", "") }
	}
	s.wg.Go(func() {
		if err := serve(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.fail(fmt.Errorf("serve on %s: %w", ln.Addr(), err))
		}
	})
	return nil
}

// fail reports what ended a part of the server, logged and delivered by
// Failed; the caller stops the server.
func (s *Server) fail(err error) {
	logs.Or(s.cfg.Logger).Error("registry failed", "err", err)
	select {
	case s.failed <- err:
	default:
	}
}

// Failed delivers what ended the listener or the embedded etcd member
// while the registry ran; a caller that serves until a signal should stop
// on it too.
func (s *Server) Failed() <-chan error { return s.failed }

// URL is the registry's Eureka URL as it serves it.
func (s *Server) URL() string {
	scheme := "http"
	if s.cfg.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + s.ln.Addr().String() + "/eureka"
}

// Addr is the address the server bound.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Store names the store the registry keeps its state in.
func (s *Server) Store() string {
	if s.etcd != nil && strings.TrimPrefix(s.cfg.Store, "etcd:") == s.etcd.ClientURL {
		return s.cfg.Store + " (embedded member " + s.cfg.Embedded.Name + ")"
	}
	return s.cfg.Store
}

// Registry is the registry the server serves.
func (s *Server) Registry() *Registry { return s.reg }

// Close stops taking requests, lets those in flight finish within ctx
// (watch streams end at once), closes the store and the embedded member,
// and waits for every goroutine it started. A second call returns what
// the first did.
func (s *Server) Close(ctx context.Context) error {
	s.closeOnce.Do(func() { s.closeErr = s.close(ctx) })
	return s.closeErr
}

func (s *Server) close(ctx context.Context) error {
	close(s.stop)
	err := s.http.Shutdown(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		err = s.http.Close()
	}
	if cerr := s.reg.Close(); err == nil {
		err = cerr
	}
	s.wg.Wait()
	if s.etcd != nil {
		s.etcd.Close()
	}
	return err
}
