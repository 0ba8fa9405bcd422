// Package etcdtest secures an etcd for tests as an operator does: auth
// turned on with root and a user whose role reads and writes the
// registry's prefix only.
// Tests only: no runtime or tool imports it outside its tests.
package etcdtest

import (
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/certs"
	"github.com/shardctl/shardctl/internal/registry/store"
)

// EnableAuth logs in to the etcd at endpoint with a client certificate
// (cert, key; ca checks its own) and turns auth on: root, and user with
// password, allowed store.DefaultEtcdPrefix.
func EnableAuth(t testing.TB, endpoint, ca, cert, key, user, password string) {
	t.Helper()
	tc, err := certs.ClientConfig(ca, cert, key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, TLS: tc, DialTimeout: budget.Of(10 * time.Second), Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := budget.Context(t, 30*time.Second)
	prefix := store.DefaultEtcdPrefix
	for _, step := range []func() error{
		func() error { _, err := c.UserAdd(ctx, "root", "root-pw-never-shown"); return err },
		func() error { _, err := c.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := c.RoleAdd(ctx, "registry"); return err },
		func() error {
			_, err := c.RoleGrantPermission(ctx, "registry", prefix, clientv3.GetPrefixRangeEnd(prefix), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := c.UserAdd(ctx, user, password); return err },
		func() error { _, err := c.UserGrantRole(ctx, user, "registry"); return err },
		func() error { _, err := c.AuthEnable(ctx); return err },
	} {
		if err := step(); err != nil {
			t.Fatalf("enable etcd auth: %v", err)
		}
	}
}
