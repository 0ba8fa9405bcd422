// Package http1 serves HTTP/1.1 to one http.Handler with less per request
// than net/http's server: on this project's machines net/http spends
// 27 µs of CPU on a request that does nothing, more than a whole call
// through nginx, so a REST front built on it cannot keep up with the
// proxies it is measured against. What it leaves out: HTTP/2 (a TLS
// listener offers http/1.1 alone), response streaming (a handler's writes
// are sent when it returns, with their Content-Length), trailers, and
// hijacking. What it keeps: keep-alive and pipelining, chunked and
// Content-Length request bodies, Expect: 100-continue, header and idle
// timeouts, a bound on the request head, a request context that ends
// when the client goes away during a long request, and a graceful stop.
// It imports nothing of the module but internal/netpeek and internal/rawsock.
package http1

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"
)

// Defaults.
const (
	DefaultMaxHeaderBytes    = 64 << 10
	DefaultReadHeaderTimeout = 10 * time.Second
	// DefaultIdleTimeout closes an idle keep-alive connection after a
	// minute, as Camunda's gateway (Spring Boot's default) does.
	DefaultIdleTimeout = 60 * time.Second
)

// Server serves HTTP/1.1 connections to Handler. Zero values take the
// defaults above.
type Server struct {
	Handler           http.Handler
	MaxHeaderBytes    int
	ReadHeaderTimeout time.Duration
	IdleTimeout       time.Duration
	Logger            *slog.Logger

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[*conn]struct{}
	shutdown  bool
	wg        sync.WaitGroup // the connections' goroutines
	idle      chan struct{}  // closed and renewed when a connection ends, for Shutdown
}

// ErrServerClosed is what Serve returns after Shutdown or Close.
var ErrServerClosed = http.ErrServerClosed

func (s *Server) init() {
	if s.listeners == nil {
		s.listeners = map[net.Listener]struct{}{}
		s.conns = map[*conn]struct{}{}
		s.idle = make(chan struct{})
	}
	if s.MaxHeaderBytes <= 0 {
		s.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if s.ReadHeaderTimeout <= 0 {
		s.ReadHeaderTimeout = DefaultReadHeaderTimeout
	}
	if s.IdleTimeout <= 0 {
		s.IdleTimeout = DefaultIdleTimeout
	}
	if s.Logger == nil {
		s.Logger = slog.New(slog.DiscardHandler)
	}
}

// Serve accepts connections on ln until Shutdown or Close, and returns
// ErrServerClosed then, or what failed accepting.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	s.init()
	if s.shutdown {
		s.mu.Unlock()
		_ = ln.Close()
		return ErrServerClosed
	}
	s.listeners[ln] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, ln)
		s.mu.Unlock()
	}()
	var pause time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.shutdown
			s.mu.Unlock()
			if closed {
				return ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				// Out of file descriptors and the like: wait, as net/http does.
				pause = min(max(2*pause, 5*time.Millisecond), time.Second)
				time.Sleep(pause)
				continue
			}
			return err
		}
		pause = 0
		c := newConn(s, nc)
		s.mu.Lock()
		if s.shutdown {
			s.mu.Unlock()
			_ = nc.Close()
			return ErrServerClosed
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			c.serve()
			s.forget(c)
		}()
	}
}

func (s *Server) forget(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.notifyIdleLocked()
	s.mu.Unlock()
}

func (s *Server) notifyIdleLocked() {
	close(s.idle)
	s.idle = make(chan struct{})
}

// stopAccepting closes the listeners and marks the server shut down.
func (s *Server) stopAccepting() {
	s.mu.Lock()
	s.init()
	s.shutdown = true
	for ln := range s.listeners {
		_ = ln.Close()
	}
	s.mu.Unlock()
}

// Shutdown stops accepting, closes idle connections, and waits for the
// requests in flight to be answered (their connections close after the
// answer); when ctx ends first, it closes every connection and returns
// ctx's error. It waits for every goroutine the server started.
func (s *Server) Shutdown(ctx context.Context) error {
	s.stopAccepting()
	for {
		s.mu.Lock()
		for c := range s.conns {
			c.closeIfIdle()
		}
		left, idle := len(s.conns), s.idle
		s.mu.Unlock()
		if left == 0 {
			s.wg.Wait()
			return nil
		}
		select {
		case <-idle:
		case <-ctx.Done():
			_ = s.Close()
			return ctx.Err()
		}
	}
}

// Close stops accepting and closes every connection at once, then waits
// for their goroutines (a handler still running gets a cancelled
// context and its answer is lost).
func (s *Server) Close() error {
	s.stopAccepting()
	s.mu.Lock()
	for c := range s.conns {
		c.abort()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}
