package credential_test

import (
	"context"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/credential"
	"github.com/shardctl/shardctl/internal/logs/logstest"
	"github.com/shardctl/shardctl/internal/oidctest"
)

func TestKind(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    credential.Config
		want string
		err  string
	}{
		{"none", credential.Config{}, credential.KindNone, ""},
		{"token", credential.Config{TokenFile: "t"}, credential.KindToken, ""},
		{"basic", credential.Config{Username: "u", PasswordFile: "p"}, credential.KindBasic, ""},
		{"basic without password", credential.Config{Username: "u"}, "", "needs passwordFile"},
		{"oauth2", credential.Config{TokenURL: "https://x/t", ClientID: "c", ClientSecretFile: "s", Audience: "zeebe-api"}, credential.KindOAuth2, ""},
		{"oauth2 without secret", credential.Config{TokenURL: "https://x/t", ClientID: "c"}, "", "needs clientSecretFile"},
		{"mixed", credential.Config{TokenFile: "t", ClientID: "c"}, "", "mixes token and oauth2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.c.Kind()
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Kind: %q, %v; want an error with %q", got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("Kind: %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func write(t *testing.T, path, v string) {
	t.Helper()
	// A Secret's files change by a rename, as kubelet does it.
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte(v), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func TestTokenFileIsReadAgainWhenItChanges(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	write(t, path, "first\n")
	src, err := credential.New("default", credential.Config{TokenFile: path}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	ctx := context.Background()
	if h, err := src.Header(ctx); err != nil || h != "Bearer first" {
		t.Fatalf("Header: %q, %v", h, err)
	}
	write(t, path, "second-longer")
	budget.Eventually(t, 5*time.Second, "the changed token file read", func() bool {
		h, err := src.Header(ctx)
		return err == nil && h == "Bearer second-longer"
	})
	// A file gone for a moment keeps the last token.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond)
	if h, err := src.Header(ctx); err != nil || h != "Bearer second-longer" {
		t.Fatalf("Header with the file gone: %q, %v", h, err)
	}
}

func TestBasic(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pw")
	write(t, path, "p@ss:word")
	src, err := credential.New("b", credential.Config{Username: "demo", PasswordFile: path}, nil)
	if err != nil {
		t.Fatal(err)
	}
	h, err := src.Header(context.Background())
	want := "Basic " + base64.StdEncoding.EncodeToString([]byte("demo:p@ss:word"))
	if err != nil || h != want {
		t.Fatalf("Header: %q, %v; want %q", h, err, want)
	}
	if strings.Contains(src.String(), "p@ss") {
		t.Fatalf("String shows the password: %s", src)
	}
}

func TestMissingFileIsAnError(t *testing.T) {
	_, err := credential.New("x", credential.Config{TokenFile: filepath.Join(t.TempDir(), "none")}, nil)
	if err == nil || !strings.Contains(err.Error(), `credential "x"`) {
		t.Fatalf("New with a missing token file: %v", err)
	}
}

// TestOAuthRefreshesBeforeExpiry logs in to a real OpenID provider whose
// tokens live 3 s (expires_in 2: it counts whole seconds), and asks for a
// header every 20 ms for 7 s: every answer comes at once with a token,
// and the logins are a few, not one per call.
func TestOAuthRefreshesBeforeExpiry(t *testing.T) {
	op, err := oidctest.Start(oidctest.Config{Clients: []oidctest.Client{{ID: "proxy", Secret: "s3cret-value", Audience: []string{"zeebe-api"}}}, TokenLifetime: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer op.Close()
	secret := filepath.Join(t.TempDir(), "secret")
	write(t, secret, "s3cret-value")
	log, logged := logstest.New()
	src, err := credential.New("default", credential.Config{TokenURL: op.TokenURL(), ClientID: "proxy", ClientSecretFile: secret, Audience: "zeebe-api"}, log)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	ctx := budget.Context(t, 10*time.Second)
	seen := map[string]bool{}
	for end := time.Now().Add(7 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		h, err := src.Header(ctx)
		if err != nil {
			t.Fatalf("Header: %v", err)
		}
		seen[h] = true
	}
	issued := op.Issued("proxy")
	if len(seen) < 3 || issued < 3 || issued > 10 {
		t.Fatalf("7 s of 3 s tokens: %d tokens seen, %d issued; want 3 to 10 (refreshed before expiry, not per call)", len(seen), issued)
	}
	if strings.Contains(logged.String(), "s3cret-value") {
		t.Fatalf("the log shows the secret:\n%s", logged.String())
	}
	t.Logf("7 s of 3 s tokens: %d issued", issued)
}

// TestOAuthWrongSecret: the error names the client and the endpoint,
// never the secret; a corrected secret file is taken at once.
func TestOAuthWrongSecret(t *testing.T) {
	op, err := oidctest.Start(oidctest.Config{Clients: []oidctest.Client{{ID: "proxy", Secret: "right-secret", Audience: []string{"zeebe-api"}}}})
	if err != nil {
		t.Fatal(err)
	}
	defer op.Close()
	secret := filepath.Join(t.TempDir(), "secret")
	write(t, secret, "wrong-secret")
	log, logged := logstest.New()
	src, err := credential.New("default", credential.Config{TokenURL: op.TokenURL(), ClientID: "proxy", ClientSecretFile: secret}, log)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	ctx := budget.Context(t, 10*time.Second)
	_, err = src.Header(ctx)
	if err == nil || !strings.Contains(err.Error(), "as proxy") || !strings.Contains(err.Error(), op.TokenURL()) {
		t.Fatalf("Header with a wrong secret: %v", err)
	}
	for _, text := range []string{err.Error(), logged.String()} {
		if strings.Contains(text, "wrong-secret") || strings.Contains(text, "right-secret") {
			t.Fatalf("a secret shows: %s", text)
		}
	}
	// The corrected file is taken within a second, not at the backoff's
	// next try.
	write(t, secret, "right-secret")
	for {
		h, err := src.Header(ctx)
		if err == nil && strings.HasPrefix(h, "Bearer ") {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the corrected secret is not used: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	logged.Wait(t, 5*time.Second, "credential login succeeded again", "credential", "default")
}
