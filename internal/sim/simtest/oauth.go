package simtest

import (
	"context"
	"path/filepath"
	"sync"
	"testing"

	"github.com/camunda/zeebe/clients/go/v8/pkg/zbc"
)

// OAuth is a Zeebe client's login: client credentials at TokenURL for
// Audience, as Camunda 8's clients log in (their ZEEBE_* environment
// variables configure the same provider outside a test binary, which is
// the only place the client reads them).
type OAuth struct {
	TokenURL, ClientID, ClientSecret, Audience string
}

// OAuthClient is the real Zeebe Go client logging in with o, over TLS
// checked against caFile ("": plain text), closed when the test ends.
func OAuthClient(t testing.TB, addr string, o OAuth, caFile string) zbc.Client {
	t.Helper()
	cache, err := zbc.NewOAuthYamlCredentialsCache(filepath.Join(t.TempDir(), "credentials"))
	if err != nil {
		t.Fatal(err)
	}
	login, err := zbc.NewOAuthCredentialsProvider(&zbc.OAuthProviderConfig{ClientID: o.ClientID, ClientSecret: o.ClientSecret,
		AuthorizationServerURL: o.TokenURL, Audience: o.Audience, Cache: cache})
	if err != nil {
		t.Fatal(err)
	}
	c, err := zbc.NewClient(&zbc.ClientConfig{GatewayAddress: addr, UsePlaintextConnection: caFile == "", CaCertificatePath: caFile,
		CredentialsProvider: &serialLogin{p: login}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// serialLogin makes one call at a time on the Go client's OAuth
// provider: 8.5's reads and writes its token unguarded from every call
// in flight (a data race the race detector reports in the client).
type serialLogin struct {
	mu sync.Mutex
	p  zbc.CredentialsProvider
}

func (s *serialLogin) ApplyCredentials(ctx context.Context, headers map[string]string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.p.ApplyCredentials(ctx, headers)
}

func (s *serialLogin) ShouldRetryRequest(ctx context.Context, err error) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.p.ShouldRetryRequest(ctx, err)
}
