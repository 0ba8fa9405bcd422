package proxies

import (
	"testing"

	"github.com/shardctl/shardctl/internal/proxy/proxyapi"
)

func TestOf(t *testing.T) {
	up := proxyapi.ShardStatus{ID: "a", Health: proxyapi.ShardHealth{Up: true}}
	down := proxyapi.ShardStatus{ID: "a", Health: proxyapi.ShardHealth{Reason: "2 health checks failed"}}
	for _, tc := range []struct {
		name   string
		views  []View
		cell   string
		reason string
	}{
		{"no proxy", nil, "-", ""},
		{"no proxy routes to it", []View{{Proxy: "p", Shards: []proxyapi.ShardStatus{{ID: "b"}}}}, "-", ""},
		{"an unreachable proxy says nothing", []View{{Proxy: "p", Error: "unreachable"}, {Proxy: "q", Shards: []proxyapi.ShardStatus{up}}}, "UP 1/1", ""},
		{"one of two holds it DOWN", []View{{Proxy: "q", Shards: []proxyapi.ShardStatus{down}}, {Proxy: "p", Shards: []proxyapi.ShardStatus{up}}}, "DOWN 1/2", "q: 2 health checks failed"},
		{"both, named by the first id", []View{{Proxy: "q", Shards: []proxyapi.ShardStatus{down}}, {Proxy: "p", Shards: []proxyapi.ShardStatus{down}}}, "DOWN 2/2", "p: 2 health checks failed"},
	} {
		h := Of(tc.views, "a")
		if h.String() != tc.cell || h.Reason() != tc.reason {
			t.Errorf("%s: %q, %q; want %q, %q", tc.name, h, h.Reason(), tc.cell, tc.reason)
		}
	}
}

func TestRefusing(t *testing.T) {
	admitting := proxyapi.ShardStatus{ID: "a", Health: proxyapi.ShardHealth{Up: true}, Backlog: &proxyapi.BacklogStatus{Records: 10, Max: 1000, Admitting: true}}
	refusing := proxyapi.ShardStatus{ID: "a", Health: proxyapi.ShardHealth{Up: true}, Backlog: &proxyapi.BacklogStatus{Records: 1234, Max: 1000, Growing: true, Slope: 12.4,
		State: proxyapi.AdmissionRefused, Reason: "backlog 1.2k records (max 1.0k), growing +12/s"}}
	noMetrics := proxyapi.ShardStatus{ID: "a", Health: proxyapi.ShardHealth{Up: true}}
	for _, tc := range []struct {
		name     string
		views    []View
		refusing int
		reason   string
	}{
		{"admitted", []View{{Proxy: "p", Shards: []proxyapi.ShardStatus{admitting}}}, 0, ""},
		{"no metrics URL", []View{{Proxy: "p", Shards: []proxyapi.ShardStatus{noMetrics}}}, 0, ""},
		{"one of two refuses", []View{{Proxy: "p", Shards: []proxyapi.ShardStatus{admitting}}, {Proxy: "q", Shards: []proxyapi.ShardStatus{refusing}}}, 1, "backlog 1.2k records (max 1.0k), growing +12/s"},
	} {
		h := Of(tc.views, "a")
		reason := ""
		if h.Backlog != nil {
			reason = h.Backlog.Reason
		}
		if h.Refusing != tc.refusing || reason != tc.reason {
			t.Errorf("%s: refusing %d, %q; want %d, %q", tc.name, h.Refusing, reason, tc.refusing, tc.reason)
		}
	}
}
