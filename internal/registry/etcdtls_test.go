package registry

import (
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/certs"
	"github.com/shardctl/shardctl/internal/certs/certstest"
	"github.com/shardctl/shardctl/internal/proctest"
	"github.com/shardctl/shardctl/internal/registry/replica"
	"github.com/shardctl/shardctl/internal/registry/store"
	"github.com/shardctl/shardctl/internal/registry/store/etcdtest"
)

// The registry's etcd secured as production wants it: the member serves
// clients and peers over TLS and asks for client certificates, and auth
// is on, the registry's user allowed its prefix only. A replica with the
// CA, a client certificate and its user registers and reads; one without
// a client certificate or with a wrong password is refused at start,
// saying why; the password shows nowhere.
func TestEtcdOverTLSWithAuth(t *testing.T) {
	f := certstest.Write(t, t.TempDir())
	now := time.Now()
	memberCert, memberKey := f.Issue(t, "member", now.Add(-time.Hour), now.Add(24*time.Hour), x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
	peer := fmt.Sprintf("https://127.0.0.1:%d", proctest.FreePort(t))
	m, err := store.StartEmbeddedEtcd(store.EmbeddedEtcd{Dir: t.TempDir(), Name: "m", ClientURL: "https://127.0.0.1:0", PeerURL: peer,
		InitialCluster: "m=" + peer, CertFile: memberCert, KeyFile: memberKey, CAFile: f.CA})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)

	// An operator enables auth as etcd's docs say.
	const password = "etcd-pw-9d1e"
	etcdtest.EnableAuth(t, m.ClientURL, f.CA, memberCert, memberKey, "shardctl", password)
	tc, err := certs.ClientConfig(f.CA, memberCert, memberKey)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := clientv3.New(clientv3.Config{Endpoints: []string{m.ClientURL}, TLS: tc, DialTimeout: budget.Of(10 * time.Second), Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	ctx := budget.Context(t, 30*time.Second)
	dir := t.TempDir()
	pw := filepath.Join(dir, "etcd-password")
	if err := os.WriteFile(pw, []byte(password), 0o600); err != nil {
		t.Fatal(err)
	}
	wrong := filepath.Join(dir, "wrong-password")
	if err := os.WriteFile(wrong, []byte("not-it-5c2f"), 0o600); err != nil {
		t.Fatal(err)
	}
	login := store.EtcdLogin{CAFile: f.CA, CertFile: f.Client, KeyFile: f.ClientKey, Username: "shardctl", PasswordFile: pw}
	cfg := func(l store.EtcdLogin) Config {
		return Config{Store: "etcd:" + m.ClientURL, EtcdLogin: l, Options: Options{ReadStaleness: -1, Replica: replica.Options{ID: "r1"}}}
	}

	_, base := startServer(t, cfg(login))
	waitReplicasReady(t, map[string]string{"r1": base}) // it has loaded the registry from etcd
	register(t, base, "ORDERS", "a", "UP")
	within(t, budget.Of(10*time.Second), "the registration read back", func() bool { return present(t, base, "ORDERS", "a") })
	got, err := admin.Get(ctx, store.DefaultEtcdPrefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err == nil {
		t.Errorf("root's client read the prefix without logging in (%d keys): auth is not on", got.Count)
	}

	for _, tc := range []struct {
		name  string
		login store.EtcdLogin
		want  string
	}{
		{"no client certificate", store.EtcdLogin{CAFile: f.CA, Username: "shardctl", PasswordFile: pw}, "certificate"},
		{"a wrong password", store.EtcdLogin{CAFile: f.CA, CertFile: f.Client, KeyFile: f.ClientKey, Username: "shardctl", PasswordFile: wrong}, "authentication failed"},
		{"a user without its password file", store.EtcdLogin{CAFile: f.CA, Username: "shardctl"}, "password file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(cfg(tc.login))
			if err == nil {
				s.reg.Close()
				t.Fatal("New: no error")
			}
			if !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), password) || strings.Contains(err.Error(), "not-it-5c2f") {
				t.Fatalf("New: %v; want an error with %q, without a password", err, tc.want)
			}
		})
	}
}
