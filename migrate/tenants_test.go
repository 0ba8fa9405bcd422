package migrate

import (
	"testing"

	"github.com/shardctl/shardctl/internal/registry/registryapi"
)

// A cutover's preflight refuses a target pool that lacks a physical
// tenant the source pool serves: that tenant's work could never move.
func TestUnservedAfter(t *testing.T) {
	shard := func(pool, tenants string) registryapi.Shard {
		sh := registryapi.Shard{Pool: pool, Metadata: map[string]string{}}
		if tenants != "" {
			sh.Metadata[registryapi.MetaPhysicalTenants] = tenants
		}
		return sh
	}
	for _, tc := range []struct {
		name   string
		shards []registryapi.Shard
		want   string
	}{
		{"no tenants anywhere", []registryapi.Shard{shard("blue", ""), shard("green", "")}, ""},
		{"default moves to a list naming it", []registryapi.Shard{shard("blue", ""), shard("green", "default,acme")}, ""},
		{"acme split over green", []registryapi.Shard{shard("blue", "default,acme"), shard("green", "default"), shard("green", "acme")}, ""},
		{"acme missing", []registryapi.Shard{shard("blue", "default,acme"), shard("green", "default")}, "acme"},
		{"default missing", []registryapi.Shard{shard("blue", ""), shard("green", "acme")}, "default"},
		{"other pools do not count", []registryapi.Shard{shard("blue", "acme"), shard("canary", "acme"), shard("green", "")}, "acme"},
	} {
		got, ok := unservedAfter(tc.shards, "blue", "green")
		if got != tc.want || ok != (tc.want == "") {
			t.Errorf("%s: %q, %v; want %q", tc.name, got, ok, tc.want)
		}
	}
}
