package main

import (
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/load"
	"github.com/shardctl/shardctl/internal/proctest"
	"github.com/shardctl/shardctl/internal/proxy/proxyapi"
	"github.com/shardctl/shardctl/internal/sim/simtest"
)

// buildHelper builds a test's helper command, the package at pkg in this
// module, and returns its path.
func buildHelper(t *testing.T, pkg string) string {
	t.Helper()
	exe := filepath.Join(t.TempDir(), filepath.Base(pkg))
	if out, err := exec.Command("go", "build", "-o", exe, "github.com/shardctl/shardctl/"+pkg).CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", pkg, err, out)
	}
	return exe
}

// secretFile writes a secret as a mounted Secret holds it.
func secretFile(t *testing.T, dir, name, secret string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestSecuredFederation starts every part as a user does: an OpenID
// provider whose tokens live 3 s, two simulators that require its tokens
// (`sim serve --auth oidc`), and a proxy that logs in with its own client
// credentials (the README's --shard-* flags). zbctl, the Zeebe Go
// client's CLI, logs in through its ZEEBE_* environment variables and
// deploys and creates instances through the proxy for 8 s (several
// tokens' lives of the proxy's). No shard is held DOWN or refuses the
// proxy, and no secret shows in what the proxy prints. `probe health`
// names a refusal, and passes with a credential of its own.
func TestSecuredFederation(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const proxySecret, zbctlSecret = "proxy-secret-a81c", "zbctl-secret-33d0"
	op := proctest.Start(t, buildHelper(t, "internal/oidctest/cmd/oidcprovider"), nil, "-token-lifetime", "3s",
		"-client", "shardctl-proxy:zeebe-api:"+secretFile(t, dir, "proxy", proxySecret),
		"-client", "zbctl:zeebe-api:"+secretFile(t, dir, "zbctl", zbctlSecret))
	issuer := op.Addr
	var shardFlags []string
	var sims []string
	for i, id := range []string{"a", "b"} {
		s := proctest.Start(t, bin, nil, "sim", "serve", "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--partitions", "2",
			"--auth", "oidc", "--issuer", issuer, "--audience", "zeebe-api")
		sims = append(sims, s.Addr)
		shardFlags = append(shardFlags, "--shard", id+"="+s.Addr+",slot="+string(rune('1'+i)))
	}
	proxy := proctest.Start(t, bin, nil, append([]string{"proxy", "serve", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0",
		"--health-interval", "300ms", "--health-timeout", "300ms",
		"--shard-token-url", issuer + "/oauth/token", "--shard-client-id", "shardctl-proxy",
		"--shard-client-secret-file", filepath.Join(dir, "proxy"), "--shard-audience", "zeebe-api"}, shardFlags...)...)
	admin := "http://" + strings.TrimSuffix(proxy.Line(t, "admin on http://"), "/shards")

	zbctl := simtest.Zbctl(t)
	zenv := []string{"HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH"),
		"ZEEBE_CLIENT_ID=zbctl", "ZEEBE_CLIENT_SECRET=" + zbctlSecret,
		"ZEEBE_AUTHORIZATION_SERVER_URL=" + issuer + "/oauth/token", "ZEEBE_TOKEN_AUDIENCE=zeebe-api"}
	run := func(args ...string) string {
		t.Helper()
		r := runBin(t, zbctl, zenv, "", append(args, "--address", proxy.Addr, "--insecure")...)
		if r.code != 0 {
			t.Fatalf("zbctl %v: exit %d\n%s%s", args, r.code, r.stdout, r.stderr)
		}
		return r.stdout + r.stderr
	}
	bpmn := filepath.Join(dir, "order.bpmn")
	if err := os.WriteFile(bpmn, load.Process("order", "work"), 0o644); err != nil {
		t.Fatal(err)
	}
	run("deploy", "resource", bpmn)
	created := 0
	for end := time.Now().Add(8 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		created++
		if out := run("create", "instance", "order"); !strings.Contains(out, `"processInstanceKey"`) {
			t.Fatalf("create instance: %s", out)
		}
	}
	resp, err := http.Get(admin + "/shards")
	if err != nil {
		t.Fatal(err)
	}
	var shards struct {
		Shards []proxyapi.ShardStatus `json:"shards"`
	}
	err = json.NewDecoder(resp.Body).Decode(&shards)
	resp.Body.Close()
	if err != nil || len(shards.Shards) != 2 {
		t.Fatalf("GET /shards: %v, %+v", err, shards)
	}
	for _, s := range shards.Shards {
		if !s.Health.Up || s.Health.Auth != "" || s.Credential != "default" {
			t.Errorf("shard %s: up %v, auth %q, credential %q", s.ID, s.Health.Up, s.Health.Auth, s.Credential)
		}
	}
	stderr := proxy.Stderr()
	for _, bad := range []string{`"shard down"`, `"shard refuses the proxy's credential"`, `"credential login failed"`, proxySecret, zbctlSecret} {
		if strings.Contains(stderr, bad) {
			t.Errorf("the proxy printed %s:\n%s", bad, stderr)
		}
	}

	// probe health reaches a shard with the credential it is given, and
	// names a refusal without one.
	probe := func(args ...string) result {
		return runBin(t, bin, nil, "", append([]string{"probe", "health", "zeebe=" + sims[0], "-o", "json"}, args...)...)
	}
	if r := probe(); r.code != 3 || !strings.Contains(r.stdout, "UNAUTHENTICATED: Expected a bearer token") {
		t.Errorf("probe health without a credential: exit %d, %s%s", r.code, r.stdout, r.stderr)
	}
	if r := probe("--shard-token-url", issuer+"/oauth/token", "--shard-client-id", "zbctl", "--shard-client-secret-file", filepath.Join(dir, "zbctl"),
		"--shard-audience", "zeebe-api"); r.code != 0 || strings.Contains(r.stdout+r.stderr, zbctlSecret) {
		t.Errorf("probe health with a credential: exit %d, %s%s", r.code, r.stdout, r.stderr)
	}
	t.Logf("%d instances created with zbctl through a proxy logging in with 3 s tokens", created)
}
