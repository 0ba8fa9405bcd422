// Package certs serves and checks TLS from PEM files. A server's
// certificate, key and client CA are read again when the files change, so
// a rotated certificate (a renewed Kubernetes Secret, mounted as files) is
// served from the next handshake on, without a restart.
// It imports nothing of this module.
package certs

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sync"
	"time"
)

// recheck bounds how often a handshake looks at the files.
const recheck = time.Second

// Server is a TLS server configuration read from files.
type Server struct {
	certFile, keyFile, clientCAFile string
	// OnReload hears every reload: err is nil when the new files are in
	// force, else why they were refused (the previous ones stay).
	OnReload func(err error)

	mu      sync.Mutex
	checked time.Time
	stamp   string
	current *tls.Config
}

// NewServer reads the certificate and key (and, when clientCAFile is not
// "", the CA that client certificates must be signed by: a client without
// one is refused).
func NewServer(certFile, keyFile, clientCAFile string) (*Server, error) {
	if certFile == "" || keyFile == "" {
		return nil, errors.New("TLS needs both a certificate and a key file")
	}
	s := &Server{certFile: certFile, keyFile: keyFile, clientCAFile: clientCAFile}
	stamp, err := s.stampNow()
	if err != nil {
		return nil, err
	}
	cfg, err := s.load()
	if err != nil {
		return nil, err
	}
	s.stamp, s.current, s.checked = stamp, cfg, time.Now()
	return s, nil
}

// Config is the tls.Config to serve with: each handshake gets the files'
// current contents.
func (s *Server) Config() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
		return s.config(time.Now()), nil
	}}
}

// ConfigALPN is Config offering the application protocols given (a REST
// API's "http/1.1") where Config offers gRPC's h2.
func (s *Server) ConfigALPN(protos ...string) *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
		c := s.config(time.Now()).Clone()
		c.NextProtos = protos
		return c, nil
	}}
}

func (s *Server) config(now time.Time) *tls.Config {
	s.mu.Lock()
	defer s.mu.Unlock()
	if now.Sub(s.checked) < recheck {
		return s.current
	}
	s.checked = now
	stamp, err := s.stampNow()
	if err != nil || stamp == s.stamp {
		return s.current // a file missing mid-rotation: keep serving
	}
	cfg, err := s.load()
	if err == nil {
		s.current, s.stamp = cfg, stamp
	}
	if s.OnReload != nil {
		s.OnReload(err)
	}
	return s.current
}

// stampNow identifies the files' versions by size and modification time.
func (s *Server) stampNow() (string, error) {
	var stamp string
	for _, f := range []string{s.certFile, s.keyFile, s.clientCAFile} {
		if f == "" {
			continue
		}
		fi, err := os.Stat(f)
		if err != nil {
			return "", fmt.Errorf("TLS: %w", err)
		}
		stamp += fmt.Sprintf("%s:%d:%d;", f, fi.Size(), fi.ModTime().UnixNano())
	}
	return stamp, nil
}

func (s *Server) load() (*tls.Config, error) {
	pair, err := tls.LoadX509KeyPair(s.certFile, s.keyFile)
	if err != nil {
		return nil, fmt.Errorf("TLS certificate %s and key %s: %w", s.certFile, s.keyFile, err)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{pair}, NextProtos: []string{"h2"}}
	if s.clientCAFile != "" {
		pool, err := Pool(s.clientCAFile)
		if err != nil {
			return nil, err
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// Pool reads the PEM certificates of a CA file.
func Pool(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("TLS CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("TLS CA %s: no PEM certificate in it", file)
	}
	return pool, nil
}

// Transport is net/http's default transport speaking TLS with tc (a
// server's CA, a client certificate): how a client of this module dials
// https with trust of its own.
func Transport(tc *tls.Config) *http.Transport {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = tc
	return tr
}

// ClientConfig is the TLS configuration of a client: servers' certificates
// checked against caFile ("": the system's roots) and, when certFile and
// keyFile are given, a client certificate for servers that ask for one,
// read again when its files change (as a Server's).
func ClientConfig(caFile, certFile, keyFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pool, err := Pool(caFile)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
	}
	if certFile == "" && keyFile == "" {
		return cfg, nil
	}
	pair, err := NewServer(certFile, keyFile, "")
	if err != nil {
		return nil, fmt.Errorf("client certificate: %w", err)
	}
	cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		return &pair.config(time.Now()).Certificates[0], nil
	}
	return cfg, nil
}
