package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/camunda/zeebe/clients/go/v8/pkg/zbc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/certs"
	"github.com/shardctl/shardctl/internal/certs/certstest"
	pb "github.com/shardctl/shardctl/internal/gatewaypb"
	"github.com/shardctl/shardctl/internal/load"
	"github.com/shardctl/shardctl/internal/proxy/proxyapi"
	"github.com/shardctl/shardctl/internal/proxy/route"
	"github.com/shardctl/shardctl/internal/registry/registryapi"
	"github.com/shardctl/shardctl/internal/sim"
	"github.com/shardctl/shardctl/internal/sim/simtest"
	"github.com/shardctl/shardctl/probes/proxies"
)

// tlsServer serves cert and key (with clientCA: client certificates
// required).
func tlsServer(t *testing.T, cert, key, clientCA string) *certs.Server {
	t.Helper()
	s, err := certs.NewServer(cert, key, clientCA)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A proxy that checks client certificates, in front of a shard that
// serves TLS: a client with a certificate the CA signed deploys and
// starts an instance; one without is refused; the real Zeebe client
// reaches a TLS listener with its CA file.
func TestTLSClientsAndShards(t *testing.T) {
	f := certstest.Write(t, t.TempDir())
	shard := simtest.Start(t, sim.Config{Partitions: 1, TLS: tlsServer(t, f.Server, f.ServerKey, "")})
	shards := []proxyapi.ShardConfig{{ID: "secure", Addr: shard.Addr().String(), Slot: 1, TLS: "true"}}
	p := startProxy(t, Config{Shards: shards, UpstreamCA: f.CA, TLS: tlsServer(t, f.Server, f.ServerKey, f.CA)})

	roots, err := certs.Pool(f.CA)
	if err != nil {
		t.Fatal(err)
	}
	call := func(withCert bool) error {
		cfg := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
		if withCert {
			pair, err := tls.LoadX509KeyPair(f.Client, f.ClientKey)
			if err != nil {
				t.Fatal(err)
			}
			cfg.Certificates = []tls.Certificate{pair}
		}
		conn, err := grpc.NewClient(p.Addr().String(), grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ctx := budget.Context(t, 10*time.Second)
		c := pb.NewGatewayClient(conn)
		if _, err := c.DeployResource(ctx, &pb.DeployResourceRequest{Resources: []*pb.Resource{{Name: "order.bpmn", Content: load.Process("order", "work")}}}); err != nil {
			return err
		}
		_, err = c.CreateProcessInstance(ctx, &pb.CreateProcessInstanceRequest{BpmnProcessId: "order", Version: -1})
		return err
	}
	if err := call(true); err != nil {
		t.Fatalf("with a client certificate: %v", err)
	}
	// The server ends the handshake; whether the client reads the alert
	// ("certificate required") or a reset first is a race of TLS 1.3.
	if err := call(false); status.Code(err) != codes.Unavailable {
		t.Errorf("without a client certificate: %v, want UNAVAILABLE (the handshake refused)", err)
	}

	// The real Zeebe client checks the proxy against a CA file; it has no
	// client certificate, so this listener asks for none.
	open := startProxy(t, Config{Shards: shards, UpstreamCA: f.CA, TLS: tlsServer(t, f.Server, f.ServerKey, "")})
	c, err := zbc.NewClient(&zbc.ClientConfig{GatewayAddress: open.Addr().String(), CaCertificatePath: f.CA})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	topo, err := c.NewTopologyCommand().Send(budget.Context(t, 10*time.Second))
	if err != nil || len(topo.GetBrokers()) == 0 {
		t.Fatalf("Zeebe client over TLS: %v %v", topo, err)
	}
}

// A shard whose certificate the proxy cannot trust is refused at once
// with the reason and the shard named; tls=insecure connects anyway.
func TestTLSUpstreamRefusals(t *testing.T) {
	f := certstest.Write(t, t.TempDir())
	good := simtest.Start(t, sim.Config{Partitions: 1, TLS: tlsServer(t, f.Server, f.ServerKey, "")})
	expired := simtest.Start(t, sim.Config{Partitions: 1, TLS: tlsServer(t, f.Expired, f.ExpiredKey, "")})
	plain := simtest.Start(t, sim.Config{Partitions: 1})
	for _, tc := range []struct {
		name     string
		addr     string
		mode, ca string
		want     string // "" connects
	}{
		{"signed by the upstream CA", good.Addr().String(), "true", f.CA, ""},
		{"wrong CA", good.Addr().String(), "true", f.OtherCA, "certificate signed by unknown authority"},
		{"expired certificate", expired.Addr().String(), "true", f.CA, "expired"},
		{"TLS to a plain-text shard", plain.Addr().String(), "true", f.CA, "does not look like a TLS handshake"},
		{"insecure skips the check", good.Addr().String(), "insecure", f.OtherCA, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := New(Config{Front: os.Getenv(envFront), Listen: "127.0.0.1:0", UpstreamCA: tc.ca, Health: route.HealthConfig{Interval: -1},
				Shards: []proxyapi.ShardConfig{{ID: "s1", Addr: tc.addr, Slot: 1, TLS: tc.mode}}})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), budget.Of(20*time.Second))
			defer cancel()
			err = p.Start(ctx)
			if err == nil {
				defer p.Close(ctx)
			}
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Start: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "s1")):
				t.Fatalf("Start: %v, want an error naming s1 with %q", err, tc.want)
			}
		})
	}
	if _, err := New(Config{Listen: "127.0.0.1:0", UpstreamCA: f.ServerKey, Shards: []proxyapi.ShardConfig{{ID: "s1", Addr: "127.0.0.1:1", Slot: 1}}}); err == nil || !strings.Contains(err.Error(), "--upstream-ca") {
		t.Errorf("a CA file without a certificate: %v", err)
	}
	if _, err := New(Config{Listen: "127.0.0.1:0", Shards: []proxyapi.ShardConfig{{ID: "s1", Addr: "127.0.0.1:1", Slot: 1, TLS: "yes"}}}); err == nil || !strings.Contains(err.Error(), `tls "yes"`) {
		t.Errorf("tls=yes: %v", err)
	}
}

// A certificate rotated on disk while clients keep calling, the proxy's
// and its shard's at once (a renewed Secret): no call fails, connections
// opened before keep going, and those opened after get the new
// certificate from the proxy and the shard alike.
func TestCertificateRotatedUnderLoad(t *testing.T) {
	f := certstest.Write(t, t.TempDir())
	shardTLS, proxyTLS := tlsServer(t, f.Server, f.ServerKey, ""), tlsServer(t, f.Server, f.ServerKey, "")
	reloaded := make(chan struct{}, 1)
	proxyTLS.OnReload = func(err error) {
		if err == nil {
			select {
			case reloaded <- struct{}{}:
			default:
			}
		}
	}
	shard := simtest.Start(t, sim.Config{Partitions: 2, TLS: shardTLS})
	p := startProxy(t, Config{Shards: []proxyapi.ShardConfig{{ID: "secure", Addr: shard.Addr().String(), Slot: 1, TLS: "true"}}, UpstreamCA: f.CA, TLS: proxyTLS,
		Health: route.HealthConfig{Interval: 200 * time.Millisecond, Timeout: 200 * time.Millisecond}})
	client := func() zbc.Client {
		c, err := zbc.NewClient(&zbc.ClientConfig{GatewayAddress: p.Addr().String(), CaCertificatePath: f.CA})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	ctx := budget.Context(t, time.Minute)
	long := client()
	defer long.Close()
	if _, err := long.NewDeployResourceCommand().AddResource(load.Process("order", "work"), "order.bpmn").Send(ctx); err != nil {
		t.Fatal(err)
	}
	var calls, failed atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	create := func(c zbc.Client) {
		if _, err := c.NewCreateInstanceCommand().BPMNProcessId("order").LatestVersion().Send(ctx); err != nil {
			failed.Add(1)
			t.Errorf("create: %v", err)
		}
		calls.Add(1)
	}
	for range 4 { // connections opened before the rotation
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
					create(long)
				}
			}
		})
	}
	wg.Go(func() { // a new connection every 100 ms, each a handshake
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
				c := client()
				create(c)
				c.Close()
			}
		}
	})
	time.Sleep(time.Second)
	now := time.Now()
	f.Issue(t, "server", now.Add(-time.Minute), now.Add(48*time.Hour), x509.ExtKeyUsageServerAuth)
	// The proxy looks at its files at a client's handshake, at most once
	// a second; the shard at the next connection to it (the proxy's stay
	// open), which the check below makes.
	taken := false
	select {
	case <-reloaded:
		taken = true
		time.Sleep(time.Second)
	case <-time.After(budget.Of(10 * time.Second)):
	}
	close(stop)
	wg.Wait()
	if !taken {
		t.Fatal("the proxy did not take the rotated certificate")
	}
	want, err := tls.LoadX509KeyPair(f.Server, f.ServerKey)
	if err != nil {
		t.Fatal(err)
	}
	roots, err := certs.Pool(f.CA)
	if err != nil {
		t.Fatal(err)
	}
	for what, addr := range map[string]string{"proxy": p.Addr().String(), "shard": shard.Addr().String()} {
		conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: roots, NextProtos: []string{"h2"}})
		if err != nil {
			t.Fatalf("%s after the rotation: %v", what, err)
		}
		got := conn.ConnectionState().PeerCertificates[0].Raw
		conn.Close()
		if string(got) != string(want.Certificate[0]) {
			t.Errorf("the %s serves the old certificate after the rotation", what)
		}
	}
	if calls.Load() < 50 || failed.Load() > 0 {
		t.Fatalf("%d calls across the rotation, %d failed; want many, none failed", calls.Load(), failed.Load())
	}
	t.Logf("%d calls across the rotation of the proxy's and the shard's certificate, none failed", calls.Load())
}

// The admin address over https with a token: /metrics, /healthz and
// /readyz answer anyone (scrapers, the kubelet), GET /shards and pprof
// want the token; the tools' reader of /shards (probes/proxies) brings
// it and the CA.
func TestAdminTLSAndToken(t *testing.T) {
	f := certstest.Write(t, t.TempDir())
	token := filepath.Join(t.TempDir(), "admin-token")
	if err := os.WriteFile(token, []byte("admin-token-7a2c\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	shard := simtest.Start(t, sim.Config{Partitions: 1})
	p := startProxy(t, Config{Shards: simtest.ShardConfigs([]*sim.Sim{shard}), Profiling: true,
		AdminTLS: tlsServer(t, f.Server, f.ServerKey, ""), AdminTokenFile: token})
	if !strings.HasPrefix(p.AdminURL(), "https://") {
		t.Fatalf("admin URL %s", p.AdminURL())
	}
	tc, err := certs.ClientConfig(f.CA, "", "")
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tc}, Timeout: budget.Of(10 * time.Second)}
	defer hc.CloseIdleConnections()
	get := func(path, tok string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, p.AdminURL()+path, nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, tc := range []struct {
		path, token string
		want        int
	}{
		{"/metrics", "", 200},
		{"/healthz", "", 200},
		{"/readyz", "", 200},
		{"/shards", "", 401},
		{"/shards", "wrong", 401},
		{"/shards", "admin-token-7a2c", 200},
		{"/debug/pprof/cmdline", "", 401},
		{"/debug/pprof/cmdline", "admin-token-7a2c", 200},
	} {
		if got := get(tc.path, tc.token); got != tc.want {
			t.Errorf("GET %s with token %q: %d, want %d", tc.path, tc.token, got, tc.want)
		}
	}
	reg := adminRegistry{p.AdminURL()}
	views, err := proxies.Admin{HTTP: hc, Token: "admin-token-7a2c"}.Read(budget.Context(t, 10*time.Second), reg)
	if err != nil || len(views) != 1 || views[0].Error != "" || len(views[0].Shards) != 1 {
		t.Errorf("the tools' read of /shards with the token and CA: %v, %+v", err, views)
	}
	views, _ = proxies.Admin{HTTP: hc}.Read(budget.Context(t, 10*time.Second), reg)
	if len(views) != 1 || !strings.Contains(views[0].Error, "401") {
		t.Errorf("the tools' read of /shards without the token: %+v", views)
	}
}

// adminRegistry lists one proxy at admin.
type adminRegistry struct{ admin string }

func (r adminRegistry) Shards(context.Context, string) ([]registryapi.Shard, error) {
	return []registryapi.Shard{{ID: "proxy-a", Metadata: map[string]string{registryapi.MetaAdmin: r.admin}}}, nil
}
