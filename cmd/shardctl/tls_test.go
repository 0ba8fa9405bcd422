package main

import (
	"crypto/x509"
	"strings"
	"testing"
	"time"

	"github.com/camunda/zeebe/clients/go/v8/pkg/zbc"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/certs/certstest"
	"github.com/shardctl/shardctl/internal/proctest"
)

// The binaries over TLS: a simulator serving TLS, a proxy checking it
// against --upstream-ca and serving clients over TLS itself; the Zeebe
// client reaches a shard through it; a rotated certificate is served
// without a restart; flags that do not go together are refused.
func TestProxyServeTLS(t *testing.T) {
	t.Parallel()
	f := certstest.Write(t, t.TempDir())
	sim := proctest.Start(t, bin, nil, "sim", "serve", "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--partitions", "1",
		"--tls-cert", f.Server, "--tls-key", f.ServerKey)
	px := proctest.Start(t, bin, nil, "proxy", "serve", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0",
		"--tls-cert", f.Server, "--tls-key", f.ServerKey, "--upstream-ca", f.CA, "--shard", "secure="+sim.Addr+",tls=true")
	client := func() error {
		c, err := zbc.NewClient(&zbc.ClientConfig{GatewayAddress: px.Addr, CaCertificatePath: f.CA})
		if err != nil {
			return err
		}
		defer c.Close()
		topo, err := c.NewTopologyCommand().Send(budget.Context(t, 10*time.Second))
		if err == nil && len(topo.GetBrokers()) == 0 {
			t.Fatalf("topology without brokers: %v", topo)
		}
		return err
	}
	if err := client(); err != nil {
		t.Fatalf("Zeebe client through the TLS proxy: %v", err)
	}
	now := time.Now()
	f.Issue(t, "server", now.Add(-time.Minute), now.Add(time.Hour), x509.ExtKeyUsageServerAuth)
	// The files are looked at on a handshake, at most once a second.
	budget.Eventually(t, 10*time.Second, "the rotated certificate served", func() bool {
		if err := client(); err != nil {
			t.Fatalf("after the rotation: %v", err)
		}
		return strings.Contains(px.Stderr(), "TLS: certificate files changed")
	})

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--tls-cert", f.Server}, "--tls-cert and --tls-key go together"},
		{[]string{"--tls-client-ca", f.CA}, "--tls-client-ca needs --tls-cert"},
		{[]string{"--tls-cert", f.Server, "--tls-key", f.ClientKey}, "private key does not match"},
		{[]string{"--upstream-ca", f.ServerKey}, "--upstream-ca"},
		{[]string{"--shard", "x=127.0.0.1:1,tls=yes"}, `tls "yes"`},
	} {
		args := append([]string{"proxy", "serve", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--shard", "a=127.0.0.1:1"}, tc.args...)
		r := runBin(t, bin, baseEnv(), "", args...)
		if r.code == 0 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q, want an error with %q", tc.args, r.code, r.stderr, tc.want)
		}
	}
}

// The registry over TLS with client certificates: a simulator registers
// and a proxy follows it through https with --registry-ca and a client
// certificate, shards list reads it the same way (the flags or their
// environment variables), and a client without a certificate or with an
// unknown CA is refused, saying why.
func TestRegistryServeTLS(t *testing.T) {
	t.Parallel()
	f := certstest.Write(t, t.TempDir())
	reg := proctest.Start(t, bin, nil, "registry", "serve", "--listen", "127.0.0.1:0",
		"--tls-cert", f.Server, "--tls-key", f.ServerKey, "--tls-client-ca", f.CA)
	url := "https://" + reg.Addr + "/eureka"
	if line := reg.Line(t, "eureka at "); !strings.HasPrefix(line, url+",") {
		t.Errorf("the registry says it serves %q, want %s", line, url)
	}
	tlsFlags := []string{"--registry", url, "--registry-ca", f.CA, "--registry-cert", f.Client, "--registry-key", f.ClientKey}
	proctest.Start(t, bin, nil, append([]string{"sim", "serve", "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--partitions", "1",
		"--register", url, "--shard-id", "blue-1", "--pool", "blue"}, tlsFlags[2:]...)...).Line(t, "registered as shard ")
	px := proctest.Start(t, bin, nil, append([]string{"proxy", "serve", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"}, tlsFlags...)...)
	budget.Eventually(t, 20*time.Second, "the proxy following the https registry", func() bool {
		return strings.Contains(px.Stderr(), `msg="shard added" shard=blue-1`)
	})
	env := append(baseEnv(), "SHARDCTL_REGISTRY="+url, "SHARDCTL_REGISTRY_CA="+f.CA, "SHARDCTL_REGISTRY_CERT="+f.Client, "SHARDCTL_REGISTRY_KEY="+f.ClientKey)
	if r := runBin(t, bin, env, "", "shards", "list"); r.code != 0 || !strings.Contains(r.stdout, "blue-1") {
		t.Errorf("shards list over TLS: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, tc := range []struct {
		flags []string
		want  string
	}{
		{[]string{"--registry-ca", f.CA}, "certificate"},                                                           // no client certificate
		{[]string{"--registry-ca", f.OtherCA, "--registry-cert", f.Client, "--registry-key", f.ClientKey}, "x509"}, // the registry's CA unknown
		{[]string{"--registry-cert", f.Client}, "--registry-cert and --registry-key go together"},
	} {
		r := runBin(t, bin, baseEnv(), "", append([]string{"shards", "list", "--registry", url}, tc.flags...)...)
		if r.code == 0 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("shards list %v: exit %d, stderr %q, want an error with %q", tc.flags, r.code, r.stderr, tc.want)
		}
	}
}
