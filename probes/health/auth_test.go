package health

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/authn"
	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/credential"
	"github.com/shardctl/shardctl/internal/oidctest"
	"github.com/shardctl/shardctl/internal/shardconn"
	"github.com/shardctl/shardctl/internal/sim"
	"github.com/shardctl/shardctl/internal/sim/simtest"
)

// A shard that wants a token: without one the probe names the refusal
// (not "unreachable"); with the credential its metadata names, it is
// checked as the proxy checks it.
func TestShardThatWantsAToken(t *testing.T) {
	op, err := oidctest.Start(oidctest.Config{Clients: []oidctest.Client{{ID: "sre", Secret: "sre-secret", Audience: []string{"zeebe-api"}}}})
	if err != nil {
		t.Fatal(err)
	}
	defer op.Close()
	check, err := authn.New(authn.Config{Mode: authn.ModeOIDC, Issuer: op.Issuer(), Audience: "zeebe-api"})
	if err != nil {
		t.Fatal(err)
	}
	shard := simtest.Start(t, sim.Config{Partitions: 1, Auth: check})
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("sre-secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	access, err := shardconn.NewAccess("", map[string]credential.Config{"eu": {TokenURL: op.TokenURL(), ClientID: "sre", ClientSecretFile: secret, Audience: "zeebe-api"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer access.Close()
	ctx := budget.Context(t, 30*time.Second)
	for _, tc := range []struct {
		name       string
		access     *shardconn.Access
		credential string
		healthy    bool
		reason     string
	}{
		{"no credential", nil, "", false, "UNAUTHENTICATED: Expected a bearer token in the Authorization header (credential none"},
		{"the credential its metadata names", access, "eu", true, "1 broker"},
		{"a credential not defined here", access, "us", false, `names credential "us", which is not defined here (defined: eu)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &Checker{Timeout: 10 * time.Second, Shards: tc.access}
			res := c.Check(ctx, []Target{{Name: "shard-1", Kind: KindZeebe, Address: shard.Addr().String(), Credential: tc.credential}}).Results[0]
			if res.Healthy != tc.healthy || !strings.Contains(res.Reason, tc.reason) {
				t.Fatalf("healthy %v, %q; want %v, %q", res.Healthy, res.Reason, tc.healthy, tc.reason)
			}
		})
	}
}
