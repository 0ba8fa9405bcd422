package proxy

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/camunda/zeebe/clients/go/v8/pkg/entities"
	"github.com/camunda/zeebe/clients/go/v8/pkg/worker"
	"github.com/camunda/zeebe/clients/go/v8/pkg/zbc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shardctl/shardctl/internal/authn"
	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/credential"
	"github.com/shardctl/shardctl/internal/load"
	"github.com/shardctl/shardctl/internal/logs/logstest"
	"github.com/shardctl/shardctl/internal/oidctest"
	"github.com/shardctl/shardctl/internal/proxy/route"
	"github.com/shardctl/shardctl/internal/sim"
	"github.com/shardctl/shardctl/internal/sim/simtest"
)

// The secrets of TestSecuredShards: no log line, error or answer of the
// proxy may show one.
const (
	proxySecret  = "proxy-secret-7f3a9c"
	workerSecret = "worker-secret-51be02"
)

// securedFederation is an OpenID provider whose tokens live 3 s, and
// shards that require its tokens for zeebe-api, as Camunda 8 with
// Identity (or any OIDC provider) does.
func securedFederation(t *testing.T, n int) (*oidctest.Server, []*sim.Sim) {
	t.Helper()
	op, err := oidctest.Start(oidctest.Config{TokenLifetime: 3 * time.Second, Clients: []oidctest.Client{
		{ID: "shardctl-proxy", Secret: proxySecret, Audience: []string{"zeebe-api"}},
		{ID: "worker", Secret: workerSecret, Audience: []string{"zeebe-api"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(op.Close)
	check, err := authn.New(authn.Config{Mode: authn.ModeOIDC, Issuer: op.Issuer(), Audience: "zeebe-api"})
	if err != nil {
		t.Fatal(err)
	}
	return op, simtest.StartN(t, n, sim.Config{Partitions: 2, Auth: check})
}

// proxyLogin is the proxy's own credential: client credentials at op,
// the secret in a file.
func proxyLogin(t *testing.T, op *oidctest.Server, secret string) map[string]credential.Config {
	t.Helper()
	file := filepath.Join(t.TempDir(), "client-secret")
	if err := os.WriteFile(file, []byte(secret), 0o600); err != nil {
		t.Fatal(err)
	}
	return map[string]credential.Config{"default": {TokenURL: op.TokenURL(), ClientID: "shardctl-proxy", ClientSecretFile: file, Audience: "zeebe-api"}}
}

// oauthClient is the real Zeebe Go client logging in as the worker.
func oauthClient(t *testing.T, op *oidctest.Server, addr string) zbc.Client {
	t.Helper()
	return simtest.OAuthClient(t, addr, simtest.OAuth{TokenURL: op.TokenURL(), ClientID: "worker", ClientSecret: workerSecret, Audience: "zeebe-api"}, "")
}

// TestSecuredShards runs a workload through the proxy to shards that
// require OIDC tokens of a 3 s life: the Zeebe Go client logs in with its
// own credentials (passed through), the proxy with its own for its
// health checks, a ledger replay to a shard that joins, and jobs it
// hands back. Tokens are refreshed several times; no call fails, no
// shard is held DOWN, and no secret shows.
func TestSecuredShards(t *testing.T) {
	op, shards := securedFederation(t, 3)
	log, lines := logstest.New()
	p := startProxy(t, Config{Shards: simtest.ShardConfigs(shards[:2]), Logger: log, Credentials: proxyLogin(t, op, proxySecret),
		Health: route.HealthConfig{Interval: 200 * time.Millisecond, Timeout: 200 * time.Millisecond}})
	client := oauthClient(t, op, p.Addr().String())
	ctx := budget.Context(t, time.Minute)
	for _, id := range []string{"order", "held"} {
		if _, err := client.NewDeployResourceCommand().AddResource(load.Process(id, id+"-work"), id+".bpmn").Send(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// The third shard joins now: the proxy replays the ledger to it with
	// its own token.
	third := simtest.ShardConfigs(shards)[2]
	if err := p.AddShard(ctx, third, true); err != nil {
		t.Fatal(err)
	}
	var completed, failed atomic.Int64
	simtest.Worker(t, client, client.NewJobWorker().JobType("order-work").Handler(func(c worker.JobClient, j entities.Job) {
		if _, err := c.NewCompleteJobCommand().JobKey(j.Key).Send(ctx); err != nil {
			failed.Add(1)
			t.Errorf("complete: %v", err)
			return
		}
		completed.Add(1)
	}).PollInterval(50*time.Millisecond))
	created := 0
	onThird := 0
	for end := time.Now().Add(8 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		inst, err := client.NewCreateInstanceCommand().BPMNProcessId("order").LatestVersion().Send(ctx)
		if err != nil {
			t.Fatalf("create %d: %v", created+1, err)
		}
		created++
		if slot(inst.GetProcessInstanceKey()) == third.Slot {
			onThird++
		}
	}
	budget.Eventually(t, 20*time.Second, "every instance completed", func() bool { return completed.Load() >= int64(created) })
	if onThird == 0 {
		t.Errorf("no instance of %d went to the shard that joined: was the ledger replayed to it?", created)
	}

	// Jobs the proxy hands back go with its own token: the shard makes
	// them activatable again at once.
	for range 3 {
		if _, err := client.NewCreateInstanceCommand().BPMNProcessId("held").LatestVersion().Send(ctx); err != nil {
			t.Fatal(err)
		}
	}
	activate := func() []entities.Job {
		jobs, err := client.NewActivateJobsCommand().JobType("held-work").MaxJobsToActivate(10).Timeout(time.Hour).Send(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return jobs
	}
	var held []entities.Job
	budget.Eventually(t, 10*time.Second, "3 jobs activated", func() bool { held = append(held, activate()...); return len(held) >= 3 })
	p.gateway.ReturnJobs(proxyJobs(t, held), "test")
	var again []entities.Job
	budget.Eventually(t, 10*time.Second, "the handed-back jobs activatable again", func() bool { again = append(again, activate()...); return len(again) >= len(held) })
	for _, s := range p.Shards() {
		if !s.Health.Up || s.Health.Auth != "" || s.Credential != "default" {
			t.Errorf("shard %s: up %v, auth %q, credential %q; want up, accepted, default", s.ID, s.Health.Up, s.Health.Auth, s.Credential)
		}
	}
	if downs := lines.Find(t, "shard down"); len(downs) > 0 {
		t.Errorf("shards went DOWN: %v", downs)
	}
	if refused := lines.Find(t, "shard refuses the proxy's credential"); len(refused) > 0 {
		t.Errorf("a shard refused the proxy: %v", refused)
	}
	issued := op.Issued("shardctl-proxy")
	if issued < 3 {
		t.Errorf("the proxy logged in %d times in 8 s of 3 s tokens: its token was not refreshed", issued)
	}
	if failed.Load() > 0 {
		t.Errorf("%d completions failed", failed.Load())
	}
	noSecret(t, p, lines)
	t.Logf("%d instances created and completed (%d on the shard that joined); the proxy logged in %d times, the worker %d", created, onThird, issued, op.Issued("worker"))
}

// slot is the shard slot in a key the proxy stamped.
func slot(key int64) int { return int(key>>58) & 31 }

// noSecret fails when a secret shows in the proxy's log or GET /shards.
func noSecret(t *testing.T, p *Proxy, lines *logstest.Lines) {
	t.Helper()
	shards, err := json.Marshal(p.Shards())
	if err != nil {
		t.Fatal(err)
	}
	for what, text := range map[string]string{"the log": lines.String(), "GET /shards": string(shards)} {
		for _, secret := range []string{proxySecret, workerSecret} {
			if strings.Contains(text, secret) {
				t.Errorf("%s shows a secret:\n%s", what, text)
			}
		}
	}
}

// TestWrongProxySecret: the proxy's own login fails. Each shard is
// reported refusing the proxy's credential in GET /shards and its gauge,
// once, and stays UP: clients with their own tokens are served, a client
// without one gets the shard's own answer. A corrected secret file is
// taken at the next login, and the report clears.
func TestWrongProxySecret(t *testing.T) {
	op, shards := securedFederation(t, 2)
	log, lines := logstest.New()
	creds := proxyLogin(t, op, "wrong-secret-0c41d9")
	p := startProxy(t, Config{Shards: simtest.ShardConfigs(shards), Logger: log, Credentials: creds,
		Health: route.HealthConfig{Interval: 200 * time.Millisecond, Timeout: 200 * time.Millisecond}})
	budget.Eventually(t, 10*time.Second, "both shards reported refusing the proxy's credential", func() bool {
		for _, s := range p.Shards() {
			if !strings.HasPrefix(s.Health.Auth, "UNAUTHENTICATED: ") {
				return false
			}
		}
		return true
	})
	time.Sleep(2 * time.Second) // ten health rounds
	for _, s := range p.Shards() {
		if !s.Health.Up || s.State != "UP" {
			t.Errorf("shard %s refusing the proxy's credential: up %v, state %s; want UP", s.ID, s.Health.Up, s.State)
		}
		for _, want := range []string{"Expected a bearer token", "log in at " + op.TokenURL() + " as shardctl-proxy"} {
			if !strings.Contains(s.Health.Auth, want) {
				t.Errorf("shard %s: auth %q does not say %q", s.ID, s.Health.Auth, want)
			}
		}
		if v := proxyMetric(t, p, "shardctl_proxy_shard_auth_refused", "shard", s.ID); v != 1 {
			t.Errorf("shard %s: shardctl_proxy_shard_auth_refused %v, want 1", s.ID, v)
		}
		if v := proxyMetric(t, p, "shardctl_proxy_shard_up", "shard", s.ID); v != 1 {
			t.Errorf("shard %s: shardctl_proxy_shard_up %v, want 1", s.ID, v)
		}
		if n := len(lines.Find(t, "shard refuses the proxy's credential", "shard", s.ID)); n != 1 {
			t.Errorf("shard %s: %d lines say it refuses the proxy's credential, want 1 (no flapping)", s.ID, n)
		}
	}
	if downs := lines.Find(t, "shard down"); len(downs) > 0 {
		t.Errorf("shards went DOWN for the proxy's credential: %v", downs)
	}
	ctx := budget.Context(t, 30*time.Second)
	client := oauthClient(t, op, p.Addr().String())
	if _, err := client.NewDeployResourceCommand().AddResource(load.Process("order", "work"), "order.bpmn").Send(ctx); err != nil {
		t.Fatalf("a client with its own token: deploy: %v", err)
	}
	if _, err := client.NewCreateInstanceCommand().BPMNProcessId("order").LatestVersion().Send(ctx); err != nil {
		t.Fatalf("a client with its own token: create: %v", err)
	}
	anonymous := newClient(t, p.Addr().String())
	_, err := anonymous.NewCreateInstanceCommand().BPMNProcessId("order").LatestVersion().Send(ctx)
	if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "Expected a bearer token") {
		t.Fatalf("a client without a token: %v; want the shard's UNAUTHENTICATED", err)
	}
	noSecret(t, p, lines)
	if strings.Contains(lines.String(), "wrong-secret-0c41d9") {
		t.Errorf("the log shows the wrong secret")
	}

	if err := os.WriteFile(creds["default"].ClientSecretFile, []byte(proxySecret), 0o600); err != nil {
		t.Fatal(err)
	}
	budget.Eventually(t, 10*time.Second, "the corrected secret taken", func() bool {
		for _, s := range p.Shards() {
			if s.Health.Auth != "" {
				return false
			}
		}
		return true
	})
	lines.Wait(t, 5*time.Second, "shard accepts the proxy's credential")
	for _, s := range p.Shards() {
		if v := proxyMetric(t, p, "shardctl_proxy_shard_auth_refused", "shard", s.ID); v != 0 {
			t.Errorf("shard %s: shardctl_proxy_shard_auth_refused %v after the fix, want 0", s.ID, v)
		}
	}
}

// Shards that trust different issuers: each names the proxy's credential
// for its issuer (credential=, as its registry metadata does), and each
// takes the proxy's own calls; a shard naming a credential the
// configuration does not define is refused, naming it.
func TestShardsOfTwoIssuers(t *testing.T) {
	eu, euShards := securedFederation(t, 1)
	us, usShards := securedFederation(t, 1)
	creds := map[string]credential.Config{"eu": proxyLogin(t, eu, proxySecret)["default"], "us": proxyLogin(t, us, proxySecret)["default"]}
	shards := simtest.ShardConfigs(append(euShards, usShards...))
	shards[0].Credential, shards[1].Credential = "eu", "us"
	log, lines := logstest.New()
	p := startProxy(t, Config{Shards: shards, Logger: log, Credentials: creds,
		Health: route.HealthConfig{Interval: 200 * time.Millisecond, Timeout: 200 * time.Millisecond}})
	time.Sleep(time.Second) // five health rounds
	for _, s := range p.Shards() {
		if s.Health.Auth != "" || !s.Health.Up {
			t.Errorf("shard %s (credential %s): up %v, auth %q", s.ID, s.Credential, s.Health.Up, s.Health.Auth)
		}
	}
	if eu.Issued("shardctl-proxy") == 0 || us.Issued("shardctl-proxy") == 0 {
		t.Errorf("logins: %d at eu, %d at us; want the proxy at both", eu.Issued("shardctl-proxy"), us.Issued("shardctl-proxy"))
	}
	if refused := lines.Find(t, "shard refuses the proxy's credential"); len(refused) > 0 {
		t.Errorf("a shard refused the proxy: %v", refused)
	}

	shards[1].Credential = "asia"
	_, err := New(Config{Listen: "127.0.0.1:0", Shards: shards, Credentials: creds})
	if err == nil || !strings.Contains(err.Error(), `names credential "asia", which the configuration does not define`) {
		t.Errorf("a shard naming an undefined credential: %v", err)
	}
}
