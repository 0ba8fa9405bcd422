package certs_test

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/certs"
	"github.com/shardctl/shardctl/internal/certs/certstest"
)

// serve accepts TLS connections with cfg and completes each handshake.
func serve(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()
	return ln.Addr().String()
}

// handshake connects as a client trusting ca (with a client certificate
// when cert is not ""), and returns the server certificate's serial.
func handshake(t *testing.T, addr, ca, cert, key string) (string, error) {
	t.Helper()
	pool, err := certs.Pool(ca)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if cert != "" {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: budget.Of(5 * time.Second)}, "tcp", addr, cfg)
	if err != nil {
		return "", err
	}
	defer c.Close()
	// TLS 1.3 reports a refused client certificate on the first read.
	c.SetReadDeadline(time.Now().Add(budget.Of(2 * time.Second)))
	if _, err := c.Read(make([]byte, 1)); err != nil && !errors.Is(err, io.EOF) {
		return "", err
	}
	return c.ConnectionState().PeerCertificates[0].SerialNumber.String(), nil
}

func TestServerReloadsRotatedFiles(t *testing.T) {
	f := certstest.Write(t, t.TempDir())
	s, err := certs.NewServer(f.Server, f.ServerKey, "")
	if err != nil {
		t.Fatal(err)
	}
	reloads := make(chan error, 4)
	s.OnReload = func(err error) { reloads <- err }
	addr := serve(t, s.Config())
	first, err := handshake(t, addr, f.CA, "", "")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	f.Issue(t, "server", now.Add(-time.Hour), now.Add(time.Hour), x509.ExtKeyUsageServerAuth)
	budget.Eventually(t, 10*time.Second, "the rotated certificate served", func() bool {
		serial, err := handshake(t, addr, f.CA, "", "")
		return err == nil && serial != first
	})

	// A broken file is refused and the certificate in force stays.
	if err := os.WriteFile(f.ServerKey, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	budget.Eventually(t, 10*time.Second, "the broken key refused", func() bool {
		_, _ = handshake(t, addr, f.CA, "", "")
		for {
			select {
			case err := <-reloads:
				if err != nil {
					return true
				}
			default:
				return false
			}
		}
	})
	if _, err := handshake(t, addr, f.CA, "", ""); err != nil {
		t.Errorf("after a broken rotation: %v, want the previous certificate served", err)
	}
}

func TestServerChecksClientCertificates(t *testing.T) {
	f := certstest.Write(t, t.TempDir())
	s, err := certs.NewServer(f.Server, f.ServerKey, f.CA)
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, s.Config())
	for _, tc := range []struct {
		name      string
		ca        string
		cert, key string
		want      string // "" ok, else in the error
	}{
		{"client certificate signed by the CA", f.CA, f.Client, f.ClientKey, ""},
		{"no client certificate", f.CA, "", "", "certificate required"},
		{"server trusted by another CA", f.OtherCA, f.Client, f.ClientKey, "unknown authority"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := handshake(t, addr, tc.ca, tc.cert, tc.key)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("handshake: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("handshake: %v, want an error with %q", err, tc.want)
			}
		})
	}
}

func TestNewServerRefusesBadFiles(t *testing.T) {
	f := certstest.Write(t, t.TempDir())
	for _, tc := range []struct {
		name                string
		cert, key, clientCA string
		want                string
	}{
		{"no key", f.Server, "", "", "both a certificate and a key"},
		{"key of another certificate", f.Server, f.ClientKey, "", "private key does not match"},
		{"missing file", f.Server + ".gone", f.ServerKey, "", "no such file"},
		{"client CA without a certificate", f.Server, f.ServerKey, f.ServerKey, "no PEM certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := certs.NewServer(tc.cert, tc.key, tc.clientCA)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("NewServer: %v, want an error with %q", err, tc.want)
			}
		})
	}
}
