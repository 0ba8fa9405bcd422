package proxies

import (
	"testing"

	"github.com/shardctl/shardctl/internal/proxy"
)

func TestOf(t *testing.T) {
	up := proxy.ShardStatus{ID: "a", Health: proxy.ShardHealth{Up: true}}
	down := proxy.ShardStatus{ID: "a", Health: proxy.ShardHealth{Reason: "2 health checks failed"}}
	for _, tc := range []struct {
		name   string
		views  []View
		cell   string
		reason string
	}{
		{"no proxy", nil, "-", ""},
		{"no proxy routes to it", []View{{Proxy: "p", Shards: []proxy.ShardStatus{{ID: "b"}}}}, "-", ""},
		{"an unreachable proxy says nothing", []View{{Proxy: "p", Error: "unreachable"}, {Proxy: "q", Shards: []proxy.ShardStatus{up}}}, "UP 1/1", ""},
		{"one of two holds it DOWN", []View{{Proxy: "q", Shards: []proxy.ShardStatus{down}}, {Proxy: "p", Shards: []proxy.ShardStatus{up}}}, "DOWN 1/2", "q: 2 health checks failed"},
		{"both, named by the first id", []View{{Proxy: "q", Shards: []proxy.ShardStatus{down}}, {Proxy: "p", Shards: []proxy.ShardStatus{down}}}, "DOWN 2/2", "p: 2 health checks failed"},
	} {
		h := Of(tc.views, "a")
		if h.String() != tc.cell || h.Reason() != tc.reason {
			t.Errorf("%s: %q, %q; want %q, %q", tc.name, h, h.Reason(), tc.cell, tc.reason)
		}
	}
}
