//go:build long

package main

import (
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/oauth2/clientcredentials"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/certs"
	"github.com/shardctl/shardctl/internal/certs/certstest"
	"github.com/shardctl/shardctl/internal/proctest"
	"github.com/shardctl/shardctl/internal/registry/store/etcdtest"
	"github.com/shardctl/shardctl/internal/restgateway/sdktest"
	"github.com/shardctl/shardctl/internal/sim/simtest"
)

// TestEverythingSecured runs a federation with every hop secured, each
// part a process started as an operator would:
//
//   - an OpenID provider (zitadel/oidc's op) whose tokens live 4 s;
//   - the registry over https with a write token, its store an etcd
//     member that serves TLS with client certificates and has auth on,
//     the registry logging in as a user allowed its prefix only;
//   - four simulators (blue and green) that require the provider's tokens
//     and serve their gateway over TLS, registered through https;
//   - the proxy over TLS, logging in with client credentials of its own,
//     its admin over https with a token;
//   - the Zeebe Go client (OAuth) running orders, zbctl logging in through
//     its ZEEBE_* environment variables, and Camunda's TypeScript SDK
//     (OAuth) through the REST front;
//   - a cutover from blue to green with gates and the drain, its
//     preflight reaching the shards with a credential of its own.
//
// Several token lifetimes pass: no call fails, no shard is held DOWN or
// refuses the proxy, and no secret shows in any process's output or any
// command's -o json. Then a second proxy with a wrong secret: every shard
// says it refuses that proxy, probe health names it, and nothing flaps.
func TestEverythingSecured(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	f := certstest.Write(t, dir)
	now := time.Now()
	memberCert, memberKey := f.Issue(t, "member", now.Add(-time.Hour), now.Add(24*time.Hour), x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
	secrets := map[string]string{"proxy": "proxy-secret-0e7d", "worker": "worker-secret-91fa", "sdk": "sdk-secret-c3b2", "sre": "sre-secret-4a60",
		"etcd": "etcd-secret-7b15", "registry-token": "registry-token-e2c8", "admin-token": "admin-token-5d93", "wrong": "wrong-secret-8f21"}
	file := func(name string) string { return filepath.Join(dir, name+".secret") }
	for name, v := range secrets {
		if err := os.WriteFile(file(name), []byte(v+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}

	op := proctest.Start(t, buildHelper(t, "internal/oidctest/cmd/oidcprovider"), nil, "-token-lifetime", "4s",
		"-client", "shardctl-proxy:zeebe-api:"+file("proxy"), "-client", "worker:zeebe-api:"+file("worker"),
		"-client", "sdk:zeebe-api:"+file("sdk"), "-client", "sre:zeebe-api:"+file("sre"))
	issuer := op.Addr
	tokenURL := issuer + "/oauth/token"

	// The registry and its etcd member.
	clientURL := fmt.Sprintf("https://127.0.0.1:%d", proctest.FreePort(t))
	peerURL := fmt.Sprintf("https://127.0.0.1:%d", proctest.FreePort(t))
	reg := proctest.Start(t, bin, nil, "registry", "serve", "--listen", "127.0.0.1:0", "--eviction-interval", "1s", "--id", "r1",
		"--tls-cert", f.Server, "--tls-key", f.ServerKey, "--token-file", file("registry-token"),
		"--embedded-etcd", filepath.Join(dir, "etcd"), "--etcd-client-url", clientURL, "--etcd-peer-url", peerURL,
		"--etcd-member-cert", memberCert, "--etcd-member-key", memberKey, "--etcd-ca", f.CA,
		"--etcd-user", "shardctl", "--etcd-password-file", file("etcd"))
	regURL := "https://" + reg.Addr + "/eureka"
	etcdtest.EnableAuth(t, clientURL, f.CA, memberCert, memberKey, "shardctl", secrets["etcd"])
	registryFlags := []string{"--registry-ca", f.CA}
	env := append(baseEnv(), "SHARDCTL_REGISTRY="+regURL, "SHARDCTL_REGISTRY_CA="+f.CA, "SHARDCTL_REGISTRY_TOKEN="+secrets["registry-token"],
		"SHARDCTL_PROXY_CA="+f.CA, "SHARDCTL_PROXY_TOKEN_FILE="+file("admin-token"))
	sreFlags := []string{"--upstream-ca", f.CA, "--shard-token-url", tokenURL, "--shard-client-id", "sre",
		"--shard-client-secret-file", file("sre"), "--shard-audience", "zeebe-api"}

	sims := map[string]*proctest.Process{}
	for _, s := range []struct{ id, pool, status string }{{"blue-1", "blue", "UP"}, {"blue-2", "blue", "UP"}, {"green-1", "green", "OUT_OF_SERVICE"}, {"green-2", "green", "OUT_OF_SERVICE"}} {
		p := proctest.Start(t, bin, nil, append([]string{"sim", "serve", "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--rest-listen", "127.0.0.1:0",
			"--partitions", "2", "--timer-interval", "100ms", "--tls-cert", f.Server, "--tls-key", f.ServerKey,
			"--auth", "oidc", "--issuer", issuer, "--audience", "zeebe-api",
			"--register", regURL, "--registry-token-file", file("registry-token"), "--shard-id", s.id, "--pool", s.pool, "--status", s.status}, registryFlags...)...)
		p.Line(t, "registered as shard ")
		sims[s.id] = p
	}

	// A shard's REST API is https and wants a token too, as its gateway.
	simREST := strings.TrimSuffix(sims["blue-1"].Line(t, "REST API on "), "/v2")
	if !strings.HasPrefix(simREST, "https://") {
		t.Fatalf("a simulator serving TLS offers its REST API at %s", simREST)
	}
	login := clientcredentials.Config{ClientID: "sre", ClientSecret: secrets["sre"], TokenURL: tokenURL, EndpointParams: url.Values{"audience": {"zeebe-api"}}}
	tok, err := login.Token(budget.Context(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	https := caClient(t, f.CA)
	for _, bearer := range []string{"", tok.AccessToken} {
		req, _ := http.NewRequest(http.MethodGet, simREST+"/v2/topology", nil)
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := https.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if want := map[bool]int{true: 401, false: 200}[bearer == ""]; resp.StatusCode != want {
			t.Errorf("GET %s/v2/topology (token %v): %d, want %d", simREST, bearer != "", resp.StatusCode, want)
		}
	}

	proxyArgs := func(id, secret string) []string {
		return append([]string{"proxy", "serve", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--rest-listen", "127.0.0.1:0", "--proxy-id", id,
			"--registry", regURL, "--registry-token-file", file("registry-token"), "--tls-cert", f.Server, "--tls-key", f.ServerKey, "--upstream-ca", f.CA,
			"--admin-tls-cert", f.Server, "--admin-tls-key", f.ServerKey, "--admin-token-file", file("admin-token"),
			"--shard-token-url", tokenURL, "--shard-client-id", "shardctl-proxy", "--shard-client-secret-file", file(secret), "--shard-audience", "zeebe-api",
			"--health-interval", "500ms", "--health-timeout", "500ms"}, registryFlags...)
	}
	proxy := proctest.Start(t, bin, nil, proxyArgs("proxy-a", "proxy")...)
	rest := strings.TrimSuffix(proxy.Line(t, "REST API on "), "/v2")
	admin := adminReader(t, f.CA, secrets["admin-token"], strings.TrimSuffix(proxy.Line(t, "admin on "), "/shards"))
	budget.Eventually(t, 30*time.Second, "the proxy to follow the four shards", func() bool { return len(admin.shards(t)) == 4 })

	ctx := budget.Context(t, 5*time.Minute)
	client := simtest.OAuthClient(t, proxy.Addr, simtest.OAuth{TokenURL: tokenURL, ClientID: "worker", ClientSecret: secrets["worker"], Audience: "zeebe-api"}, f.CA)
	deploy(t, ctx, client)
	w := startWorkload(t, client, 30)
	budget.Eventually(t, 30*time.Second, "orders to ship", func() bool { return w.shipped.Load() > 30 })

	// zbctl logs in with its environment variables.
	zenv := []string{"HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH"), "ZEEBE_CLIENT_ID=worker", "ZEEBE_CLIENT_SECRET=" + secrets["worker"],
		"ZEEBE_AUTHORIZATION_SERVER_URL=" + tokenURL, "ZEEBE_TOKEN_AUDIENCE=zeebe-api", "ZEEBE_CA_CERTIFICATE_PATH=" + f.CA}
	for i := range 3 {
		r := runBin(t, simtest.Zbctl(t), zenv, "", "create", "instance", "order", "--variables", fmt.Sprintf(`{"orderId":"zbctl-%d"}`, i), "--address", proxy.Addr)
		if r.code != 0 || !strings.Contains(r.stdout, "processInstanceKey") {
			t.Fatalf("zbctl create instance: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
	}

	// Camunda's TypeScript SDK through the REST front, over TLS, with its
	// own OAuth login.
	sdk := sdktest.New(t, rest)
	sdk.Env = []string{"CAMUNDA_AUTH_STRATEGY=OAUTH", "CAMUNDA_CLIENT_ID=sdk", "CAMUNDA_CLIENT_SECRET=" + secrets["sdk"], "CAMUNDA_OAUTH_URL=" + tokenURL,
		"CAMUNDA_TOKEN_AUDIENCE=zeebe-api", "NODE_EXTRA_CA_CERTS=" + f.CA}
	sdk.Deploy(t)
	steady := sdk.Steady(t, 5, 8*time.Second, "")
	if steady.Failed > 0 || steady.Twice > 0 || steady.Completed != len(steady.Created) || len(steady.Created) < 20 {
		t.Errorf("the SDK through the REST front: %d created, %d completed, %d failed (%v), %d twice", len(steady.Created), steady.Completed, steady.Failed, steady.Errors, steady.Twice)
	}

	// The cutover, its preflight logging in as the SRE's client.
	gates := writeGates(t, `gates:
- name: green-not-critical
  signal: level
  failureCondition: result[0] >= 2
  interval: 2s
`)
	r := runBinFor(t, budget.Of(4*time.Minute), bin, env, "", append([]string{"cutover", "apply", "--from", "blue", "--to", "green", "--steps", "50,100",
		"--step-pause", "5s", "--gate-window", "20s", "--gates", gates, "--poll", "500ms", "--yes", "-o", "json"}, sreFlags...)...)
	if r.code != 0 {
		t.Fatalf("cutover apply: exit %d\nstderr: %s\nstdout: %s", r.code, r.stderr, r.stdout)
	}
	outputs := []string{r.stdout, r.stderr}
	w.halt()
	budget.Eventually(t, 60*time.Second, "every order to ship", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return len(w.done) >= len(w.orders)
	})
	w.mu.Lock()
	if len(w.failed) > 0 {
		t.Errorf("%d creates failed, e.g. %v", len(w.failed), w.failed[0])
	}
	orders := len(w.orders)
	w.mu.Unlock()

	for _, s := range admin.shards(t) {
		if s.Health.Auth != "" || !s.Health.Up {
			t.Errorf("shard %s: up %v, auth %q", s.ID, s.Health.Up, s.Health.Auth)
		}
	}
	for _, bad := range []string{`msg="shard down"`, `msg="shard refuses the proxy's credential"`, `msg="credential login failed"`} {
		if strings.Contains(proxy.Stderr(), bad) {
			t.Errorf("the proxy logged %s:\n%s", bad, proxy.Stderr())
		}
	}
	logins := strings.Count(op.Stderr(), "issued a token to shardctl-proxy")
	if logins < 5 {
		t.Errorf("the proxy logged in %d times over the run: its 4 s tokens were not refreshed", logins)
	}
	for _, cmd := range [][]string{{"shards", "list", "-o", "json"}, {"cutover", "status", "-o", "json"}, append([]string{"probe", "health", "-o", "json"}, sreFlags...)} {
		r := runBin(t, bin, env, "", cmd...)
		if r.code != 0 {
			t.Errorf("%v: exit %d\n%s%s", cmd, r.code, r.stdout, r.stderr)
		}
		outputs = append(outputs, r.stdout, r.stderr)
	}

	// A proxy whose secret is wrong: every shard refuses it, which GET
	// /shards, its gauge and probe health say; nothing is held DOWN.
	wrong := proctest.Start(t, bin, nil, proxyArgs("proxy-b", "wrong")...)
	wrongAdmin := adminReader(t, f.CA, secrets["admin-token"], strings.TrimSuffix(wrong.Line(t, "admin on "), "/shards"))
	budget.Eventually(t, 30*time.Second, "proxy-b to report every shard refusing it", func() bool {
		shards := wrongAdmin.shards(t)
		for _, s := range shards {
			if !strings.HasPrefix(s.Health.Auth, "UNAUTHENTICATED: ") {
				return false
			}
		}
		return len(shards) == 4
	})
	time.Sleep(3 * time.Second) // six health rounds
	for _, s := range wrongAdmin.shards(t) {
		if !s.Health.Up {
			t.Errorf("proxy-b holds %s DOWN for its own credential: %s", s.ID, s.Health.Reason)
		}
	}
	if n := strings.Count(wrong.Stderr(), `msg="shard refuses the proxy's credential"`); n != 4 {
		t.Errorf("proxy-b said %d times that a shard refuses it, want 4 (once each, no flapping)", n)
	}
	ph := runBin(t, bin, env, "", append([]string{"probe", "health", "-o", "json"}, sreFlags...)...)
	if ph.code != 3 || !strings.Contains(ph.stdout, "refuses the credential of 1 of 2 proxies (proxy-b: UNAUTHENTICATED") {
		t.Errorf("probe health with proxy-b refused: exit %d\n%s%s", ph.code, ph.stdout, ph.stderr)
	}
	outputs = append(outputs, ph.stdout, ph.stderr)

	everything := strings.Join(append(outputs, op.Stderr(), reg.Stderr(), proxy.Stderr(), wrong.Stderr()), "\n")
	for _, p := range sims {
		everything += p.Stderr()
	}
	for name, secret := range secrets {
		if strings.Contains(everything, secret) {
			t.Errorf("the %s secret shows in a process's output or a command's", name)
		}
	}
	t.Logf("%d orders through the proxy over a cutover, 3 by zbctl, %d by the SDK; the proxy logged in %d times; none failed", orders, len(steady.Created), logins)
}

// securedAdmin reads a proxy's GET /shards over https with its token.
type securedAdmin struct {
	url, token string
	hc         *http.Client
}

func adminReader(t *testing.T, ca, token, url string) securedAdmin {
	return securedAdmin{url: url, token: token, hc: caClient(t, ca)}
}

// caClient is an HTTP client trusting ca.
func caClient(t *testing.T, ca string) *http.Client {
	t.Helper()
	tc, err := certs.ClientConfig(ca, "", "")
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tc}, Timeout: budget.Of(10 * time.Second)}
	t.Cleanup(hc.CloseIdleConnections)
	return hc
}

func (a securedAdmin) shards(t *testing.T) []shardStatus {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, a.url+"/shards", nil)
	req.Header.Set("Authorization", "Bearer "+a.token)
	resp, err := a.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var doc struct {
		Shards []shardStatus `json:"shards"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		t.Fatalf("GET %s/shards: %s: %v", a.url, resp.Status, err)
	}
	return doc.Shards
}

// shardStatus is what the test reads of GET /shards.
type shardStatus struct {
	ID     string `json:"id"`
	Health struct {
		Up     bool   `json:"up"`
		Reason string `json:"reason"`
		Auth   string `json:"auth"`
	} `json:"health"`
}
