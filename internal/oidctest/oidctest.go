// Package oidctest is an OpenID Connect provider for tests: zitadel/oidc's
// op package (OpenID Certified) serving discovery, its signing keys and
// the client credentials grant, with JWT access tokens of a lifetime the
// test chooses, for the clients it names. Camunda's clients and
// shardctl's credentials log in to it as to Keycloak or Entra ID; the
// simulator checks its tokens as a secured gateway does.
// internal/oidctest/cmd/oidcprovider serves it as a process.
package oidctest

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/zitadel/oidc/v3/pkg/op"
	"golang.org/x/text/language"

	"github.com/shardctl/shardctl/internal/certs"
)

// Client is a service that may log in: its id and secret, and the
// audience its tokens are for (Camunda's gateway wants zeebe-api).
type Client struct {
	ID, Secret string
	Audience   []string
}

// Config of a provider.
type Config struct {
	// Listen is where it serves (default 127.0.0.1:0).
	Listen string
	// TLS, when set, serves HTTPS (the issuer is then https://…).
	TLS     *certs.Server
	Clients []Client
	// TokenLifetime of an access token (default a minute).
	TokenLifetime time.Duration
	// OnIssue, when set, hears each access token issued, by client id.
	OnIssue func(clientID string)
}

// Server is a running provider.
type Server struct {
	ln      net.Listener
	srv     *http.Server
	issuer  string
	store   *storage
	done    chan struct{}
	closeMu sync.Once
}

// Start serves a provider until Close.
func Start(cfg Config) (*Server, error) {
	ln, err := net.Listen("tcp", cmp.Or(cfg.Listen, "127.0.0.1:0"))
	if err != nil {
		return nil, err
	}
	scheme := "http"
	if cfg.TLS != nil {
		scheme = "https"
	}
	s := &Server{ln: ln, issuer: scheme + "://" + ln.Addr().String(), done: make(chan struct{})}
	s.store, err = newStorage(cfg.Clients, cmp.Or(cfg.TokenLifetime, time.Minute), cfg.OnIssue)
	if err != nil {
		ln.Close()
		return nil, err
	}
	var key [32]byte
	_, _ = rand.Read(key[:])
	opts := []op.Option{}
	if cfg.TLS == nil {
		opts = append(opts, op.WithAllowInsecure())
	}
	provider, err := op.NewProvider(&op.Config{CryptoKey: key, AuthMethodPost: true, SupportedUILocales: []language.Tag{language.English}}, s.store, op.StaticIssuer(s.issuer), opts...)
	if err != nil {
		ln.Close()
		return nil, err
	}
	s.srv = &http.Server{Handler: provider, ReadHeaderTimeout: 10 * time.Second}
	if cfg.TLS != nil {
		s.srv.TLSConfig = cfg.TLS.ConfigALPN("http/1.1")
		ln = tls.NewListener(ln, s.srv.TLSConfig)
	}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			_ = err // Close reports nothing more useful than the listener's end
		}
	}()
	return s, nil
}

// Issuer is the provider's URL; TokenURL its token endpoint.
func (s *Server) Issuer() string   { return s.issuer }
func (s *Server) TokenURL() string { return s.issuer + "/oauth/token" }

// Issued is how many access tokens the client got.
func (s *Server) Issued(clientID string) int {
	s.store.mu.Lock()
	defer s.store.mu.Unlock()
	return s.store.issued[clientID]
}

// Close stops serving and waits for it; safe twice.
func (s *Server) Close() {
	s.closeMu.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if s.srv.Shutdown(ctx) != nil {
			_ = s.srv.Close()
		}
	})
	<-s.done
}
