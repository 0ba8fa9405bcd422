package registryclient

import (
	"context"
	"crypto/tls"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/certs/certstest"
)

// resetter accepts connections and resets them at once, as a TLS
// registry does when it refused a client's certificate and the client's
// request came after it closed.
func resetter(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.(*net.TCPConn).SetLinger(0) // close with a reset
			c.Close()
		}
	})
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	return ln.Addr().String()
}

// A connection an https registry resets says that the registry may ask
// for a client certificate when none was given, and only then.
func TestUnreachableNamesAMissingClientCertificate(t *testing.T) {
	addr := resetter(t)
	f := certstest.Write(t, t.TempDir())
	cert, err := tls.LoadX509KeyPair(f.Client, f.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, scheme string
		tls          *tls.Config
		hint         bool
	}{
		{"https without a client certificate", "https", &tls.Config{}, true},
		{"https with one", "https", &tls.Config{Certificates: []tls.Certificate{cert}}, false},
		{"http", "http", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := New(tc.scheme+"://"+addr+"/eureka", "")
			if err != nil {
				t.Fatal(err)
			}
			if tc.tls != nil {
				c.UseTLS(tc.tls)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err = c.Shards(ctx, "")
			if err == nil {
				t.Fatal("no error from a registry that resets every connection")
			}
			if got := strings.Contains(err.Error(), "client certificate (--registry-cert and --registry-key"); got != tc.hint {
				t.Errorf("hint %v, want %v: %v", got, tc.hint, err)
			}
		})
	}
}
