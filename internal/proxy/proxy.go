// Package proxy is the federation proxy as a process runs it: the routing
// core (internal/proxy/route) behind a front — the frame front
// (internal/proxy/framefront) or grpc-go's server (internal/proxy/grpcfront)
// — the REST API (/v2, internal/restgateway over the gRPC front's
// handlers) when asked for, and the admin listener (/metrics, /healthz,
// /readyz, /shards), started and stopped in order. It serves the Zeebe
// gateway API, in gRPC and in REST, and spreads one
// workload over several Zeebe clusters (shards), so that clients keep
// using one gateway address and change nothing; the contract is "The
// federation contract" in docs/architecture.md. Runtimes' rule: it never
// imports probes/, commands/, tui/ or migrate/.
package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	pb "github.com/shardctl/shardctl/internal/gatewaypb"
	"github.com/shardctl/shardctl/internal/http1"
	"github.com/shardctl/shardctl/internal/proxy/framefront"
	"github.com/shardctl/shardctl/internal/proxy/grpcfront"
	"github.com/shardctl/shardctl/internal/proxy/grpcwire"
	"github.com/shardctl/shardctl/internal/proxy/queries"
	"github.com/shardctl/shardctl/internal/proxy/route"
	"github.com/shardctl/shardctl/internal/restgateway"
)

// Config of a proxy: the routing core's and its fronts' (route.Config).
type Config = route.Config

// streamWorkers is grpc-go's pool of stream workers: a unary call holds
// its worker while it waits for the shard, so there must be about as
// many workers as calls in flight; past them grpc-go starts a goroutine
// per call, whose stack then grows on every call (stack growth fell from
// 5% to 1% of the proxy's CPU at 64 in flight).
const streamWorkers = 256

// Proxy is a running federation proxy: the routing core and its fronts.
type Proxy struct {
	*route.Core

	grpc      *grpc.Server
	gateway   *grpcfront.Server // the handlers, which the frame front calls itself
	frames    *framefront.Front // with route.FrontFrames: it serves clients, grpc-go what it hands on
	addr      net.Addr
	rest      *http1.Server
	queries   *queries.Federation // the REST API's searches
	restAddr  net.Addr
	admin     *http.Server
	adminAddr net.Addr
	ready     atomic.Bool
	failed    chan error // what ended a listener early
	closed    sync.Once
	closeErr  error
}

// New checks the configuration; Start connects and serves.
func New(cfg Config) (*Proxy, error) {
	core, err := route.New(cfg)
	if err != nil {
		return nil, err
	}
	return &Proxy{Core: core, failed: make(chan error, 3)}, nil
}

// clientPingTimeout is how long a client has to answer the proxy's
// keep-alive ping.
const clientPingTimeout = 20 * time.Second

// Start connects to every shard (refusing one with too many partitions),
// loads the ledger and serves.
func (p *Proxy) Start(ctx context.Context) error {
	cfg := p.Config()
	if err := p.Open(ctx); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		p.CloseShards()
		return fmt.Errorf("listen for clients on %s: %w", cfg.Listen, err)
	}
	p.addr = ln.Addr()
	opts := []grpc.ServerOption{grpc.MaxRecvMsgSize(grpcwire.MaxRecvMsgSize),
		// As Zeebe's gateway: clients may ping every 30 s (the Zeebe
		// client pings every 45 s; grpc-go's default policy would end
		// its connection after two pings).
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 30 * time.Second, PermitWithoutStream: true}),
		grpc.NumStreamWorkers(streamWorkers)}
	// The grpc front holds its clients to the same limits where grpc-go
	// has them (its own rapid-reset defence counts streams whose handler
	// still runs; it has no connection cap).
	if cl := cfg.Clients; cl.KeepAlive > 0 || cl.IdleTimeout > 0 {
		opts = append(opts, grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: max(cl.IdleTimeout, 0), Time: max(cl.KeepAlive, 0), Timeout: clientPingTimeout}))
	}
	if cfg.Clients.HandshakeTimeout > 0 {
		opts = append(opts, grpc.ConnectionTimeout(cfg.Clients.HandshakeTimeout))
	}
	if cfg.TLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(cfg.TLS.Config())))
	}
	p.grpc = grpc.NewServer(opts...)
	p.gateway = grpcfront.New(p.Core)
	pb.RegisterGatewayServer(p.grpc, p.gateway)
	if cfg.Front == route.FrontFrames {
		var tc *tls.Config
		if cfg.TLS != nil {
			tc = cfg.TLS.Config()
		}
		p.frames = framefront.New(p.gateway, p.grpc, ln, tc)
		p.Go(func() {
			if err := p.frames.Serve(); err != nil {
				p.failed <- fmt.Errorf("serve clients on %s: %w", p.addr, err)
			}
		})
	} else {
		p.Go(func() {
			if err := p.grpc.Serve(ln); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
				p.failed <- fmt.Errorf("serve clients on %s: %w", p.addr, err)
			}
		})
	}
	if cfg.RESTListen != "" {
		if err := p.serveREST(cfg); err != nil {
			p.grpc.Stop()
			p.CloseShards()
			return err
		}
	}
	if cfg.AdminListen != "" {
		stopFronts := func() {
			p.grpc.Stop()
			if p.rest != nil {
				_ = p.rest.Close()
			}
			p.CloseShards()
		}
		handler, err := p.adminHandler()
		if err != nil {
			stopFronts()
			return err
		}
		aln, err := net.Listen("tcp", cfg.AdminListen)
		if err != nil {
			stopFronts()
			return fmt.Errorf("listen for admin on %s: %w", cfg.AdminListen, err)
		}
		p.adminAddr = aln.Addr()
		p.admin = &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
		serve := func() error { return p.admin.Serve(aln) }
		if cfg.AdminTLS != nil {
			p.admin.TLSConfig = cfg.AdminTLS.ConfigALPN("h2", "http/1.1")
			serve = func() error { return p.admin.ServeTLS(aln, "", "") }
		}
		p.Go(func() {
			if err := serve(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				p.failed <- fmt.Errorf("serve admin on %s: %w", p.adminAddr, err)
			}
		})
	}
	p.Run(ctx, p.addr, p.adminAddr)
	p.ready.Store(true)
	return nil
}

// serveREST serves the REST API over the gRPC front's handlers, so that
// both protocols share every routing decision, in HTTP/1.1 (the REST
// clients' protocol) of the proxy's own (internal/http1: net/http's
// server alone costs more CPU per call than a whole call through nginx);
// with TLS, over the clients' certificate.
func (p *Proxy) serveREST(cfg Config) error {
	ln, err := net.Listen("tcp", cfg.RESTListen)
	if err != nil {
		return fmt.Errorf("listen for the REST API on %s: %w", cfg.RESTListen, err)
	}
	p.restAddr = ln.Addr()
	if cfg.TLS != nil {
		ln = tls.NewListener(ln, cfg.TLS.ConfigALPN("http/1.1"))
	}
	p.queries = queries.New(p.Core, queries.Options{Timeout: cfg.SearchTimeout, Partial: cfg.SearchPartial, Logger: cfg.Logger})
	opts := restgateway.Options{Logger: cfg.Logger, Queries: p.queries}
	if p.frames != nil {
		opts.Unary = func(ctx context.Context, rpc string, msg []byte, auth, tenant string) ([]byte, error) {
			return framefront.Unary(ctx, p.gateway, rpc, msg, auth, tenant)
		}
	}
	p.rest = &http1.Server{
		Handler: restgateway.Handler(p.gateway, opts),
		Logger:  cfg.Logger,
	}
	p.Go(func() {
		if err := p.rest.Serve(ln); err != nil && !errors.Is(err, http1.ErrServerClosed) {
			p.failed <- fmt.Errorf("serve the REST API on %s: %w", p.restAddr, err)
		}
	})
	return nil
}

// RESTAddr is the REST API's address actually bound, or nil.
func (p *Proxy) RESTAddr() net.Addr { return p.restAddr }

// Addr is the client address actually bound.
func (p *Proxy) Addr() net.Addr { return p.addr }

// AdminAddr is the admin address actually bound, or nil.
func (p *Proxy) AdminAddr() net.Addr { return p.adminAddr }

// Failed delivers what ended a listener while the proxy ran; a caller
// that serves until a signal should stop on it too.
func (p *Proxy) Failed() <-chan error { return p.failed }

// Close stops serving gracefully: /readyz turns 503 and the proxy leaves
// the registry; after ShutdownDelay it accepts no new calls; open long
// polls and job streams end DrainBatch a second (the workers reconnect to
// another replica; buffered jobs are handed back); in-flight calls and
// hand-backs finish. When ctx ends first, whatever still runs is cut
// short. It waits for everything it started, and a second call returns
// what the first did.
func (p *Proxy) Close(ctx context.Context) error {
	p.closed.Do(func() { p.closeErr = p.close(ctx) })
	return p.closeErr
}

func (p *Proxy) close(ctx context.Context) error {
	// Out of time: whatever still runs on the proxy's behalf ends now.
	defer context.AfterFunc(ctx, p.CancelBackground)()
	p.ready.Store(false)
	p.StopFollowing()
	if d := p.Config().ShutdownDelay; d > 0 && p.grpc != nil {
		select {
		case <-time.After(d):
		case <-ctx.Done():
		}
	}
	stopped := make(chan struct{})
	switch {
	case p.frames != nil:
		// The front's clients first: grpc-go serves only what it hands on.
		go func() { p.frames.Shutdown(ctx); p.grpc.GracefulStop(); close(stopped) }()
	case p.grpc != nil:
		go func() { p.grpc.GracefulStop(); close(stopped) }()
	default:
		close(stopped)
	}
	// REST calls in flight finish; its long polls end with the others.
	restStopped := make(chan struct{})
	go func() {
		if p.rest != nil {
			if p.rest.Shutdown(ctx) != nil {
				_ = p.rest.Close()
			}
			p.queries.Close()
		}
		close(restStopped)
	}()
	p.EndLongCalls(ctx)
	select {
	case <-stopped:
	case <-ctx.Done():
		if p.grpc != nil {
			p.grpc.Stop()
		}
		<-stopped
	}
	<-restStopped
	var err error
	if p.admin != nil {
		err = p.admin.Shutdown(ctx)
	}
	p.Shutdown()
	return err
}
