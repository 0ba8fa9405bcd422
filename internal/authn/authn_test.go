package authn_test

import (
	"context"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/oauth2/clientcredentials"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shardctl/shardctl/internal/authn"
	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/oidctest"
)

// token logs in at op as id and returns the access token.
func token(t *testing.T, op *oidctest.Server, id, secret string) string {
	t.Helper()
	cfg := clientcredentials.Config{ClientID: id, ClientSecret: secret, TokenURL: op.TokenURL()}
	tok, err := cfg.Token(budget.Context(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return tok.AccessToken
}

func TestOIDC(t *testing.T) {
	op, err := oidctest.Start(oidctest.Config{TokenLifetime: 2 * time.Second, Clients: []oidctest.Client{
		{ID: "worker", Secret: "w", Audience: []string{"zeebe-api"}},
		{ID: "other", Secret: "o", Audience: []string{"operate-api"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer op.Close()
	c, err := authn.New(authn.Config{Mode: authn.ModeOIDC, Issuer: op.Issuer(), Audience: "zeebe-api"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := budget.Context(t, 20*time.Second)
	good := token(t, op, "worker", "w")
	// Another issuer's token, signed with its own key.
	op2, err := oidctest.Start(oidctest.Config{Clients: []oidctest.Client{{ID: "worker", Secret: "w", Audience: []string{"zeebe-api"}}}})
	if err != nil {
		t.Fatal(err)
	}
	defer op2.Close()
	foreign := token(t, op2, "worker", "w")
	for _, tc := range []struct {
		name, auth, refused string
	}{
		{"a token for the audience", "Bearer " + good, ""},
		{"the scheme in lower case", "bearer " + good, ""},
		{"no header", "", "Expected a bearer token"},
		{"Basic", "Basic " + base64.StdEncoding.EncodeToString([]byte("a:b")), "Expected a bearer token"},
		{"not a JWT", "Bearer not-a-jwt", "The token is not valid"},
		{"another audience", "Bearer " + token(t, op, "other", "o"), "The token is not valid"},
		{"another issuer", "Bearer " + foreign, "The token is not valid"},
		{"a signature that does not match", "Bearer " + good[:len(good)-4] + "AAAA", "The token is not valid"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := c.Check(ctx, tc.auth)
			if tc.refused == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), tc.refused) {
				t.Fatalf("Check: %v; want UNAUTHENTICATED with %q", err, tc.refused)
			}
			if len(tc.auth) > 20 && strings.Contains(err.Error(), tc.auth[7:]) {
				t.Fatalf("the refusal quotes the token: %v", err)
			}
		})
	}
	time.Sleep(2100 * time.Millisecond)
	if err := c.Check(ctx, "Bearer "+good); status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("an expired token: %v", err)
	}
}

func TestOIDCIssuerDown(t *testing.T) {
	op, err := oidctest.Start(oidctest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	issuer := op.Issuer()
	op.Close()
	c, err := authn.New(authn.Config{Mode: authn.ModeOIDC, Issuer: issuer, Audience: "zeebe-api"})
	if err != nil {
		t.Fatal(err)
	}
	err = c.Check(context.Background(), "Bearer x.y.z")
	if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "not reachable") {
		t.Fatalf("Check with the issuer down: %v", err)
	}
}

func TestBasic(t *testing.T) {
	pw := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pw, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := authn.New(authn.Config{Mode: authn.ModeBasic, Username: "demo", PasswordFile: pw})
	if err != nil {
		t.Fatal(err)
	}
	basic := func(u, p string) string { return "Basic " + base64.StdEncoding.EncodeToString([]byte(u+":"+p)) }
	for _, tc := range []struct {
		name, auth string
		ok         bool
	}{
		{"right", basic("demo", "s3cret"), true},
		{"wrong password", basic("demo", "nope"), false},
		{"wrong user", basic("root", "s3cret"), false},
		{"bearer", "Bearer s3cret", false},
		{"not base64", "Basic %%%", false},
		{"none", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := c.Check(context.Background(), tc.auth)
			if tc.ok != (err == nil) || (err != nil && status.Code(err) != codes.Unauthenticated) {
				t.Fatalf("Check: %v", err)
			}
		})
	}
}

func TestConfigErrors(t *testing.T) {
	for _, cfg := range []authn.Config{
		{Mode: "jwt"},
		{Mode: authn.ModeOIDC, Issuer: "http://x"},
		{Mode: authn.ModeBasic, Username: "u"},
		{Mode: authn.ModeBasic, Username: "u", PasswordFile: "/nonexistent/pw"},
	} {
		if _, err := authn.New(cfg); err == nil {
			t.Errorf("New(%+v): no error", cfg)
		}
	}
	if c, err := authn.New(authn.Config{}); c != nil || err != nil {
		t.Errorf("New of none: %v, %v", c, err)
	}
}
