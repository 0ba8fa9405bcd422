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

// Of reads each proxy's admission of the shard: refusing by its state or,
// from a proxy older than pacing, by Admitting alone; pacing, with the
// rates summed; and the reading shown is the most restrictive, the first
// by proxy id.
func TestAdmission(t *testing.T) {
	shard := func(b *proxyapi.BacklogStatus) proxyapi.ShardStatus {
		return proxyapi.ShardStatus{ID: "a", Health: proxyapi.ShardHealth{Up: true}, Backlog: b}
	}
	open := shard(&proxyapi.BacklogStatus{Admitting: true, State: proxyapi.AdmissionOpen, AdmitRate: 110})
	noMetrics := shard(nil)
	paced := func(rate float64, reason string) proxyapi.ShardStatus {
		return shard(&proxyapi.BacklogStatus{Admitting: true, State: proxyapi.AdmissionPaced, AdmitRate: rate, Reason: reason,
			QueueDelay: 0.31, QueueTarget: 0.25})
	}
	backlog := shard(&proxyapi.BacklogStatus{Records: 1234, Max: 1000, State: proxyapi.AdmissionRefused, Reason: "backlog 1.2k records (max 1.0k)"})
	limit := shard(&proxyapi.BacklogStatus{Admitting: true, State: proxyapi.AdmissionRefused, Reason: "700 instances in flight, at its instance limit of 700 while congested"})
	old := shard(&proxyapi.BacklogStatus{Records: 1234, Max: 1000, Growing: true, Slope: 12.4}) // no state: Admitting alone says it
	oldAdmitting := shard(&proxyapi.BacklogStatus{Records: 10, Max: 1000, Admitting: true})
	views := func(shards ...proxyapi.ShardStatus) []View {
		var out []View
		for i, s := range shards {
			out = append(out, View{Proxy: string(rune('p' + i)), Shards: []proxyapi.ShardStatus{s}})
		}
		return out
	}
	const why = "queue 310ms over the 250ms target: 20 new instances/s keep it there (100 records/s, 5.0 an instance)"
	for _, tc := range []struct {
		name             string
		views            []View
		state            string
		refusing, paced  int
		rate             float64
		reason           string
		admission, shown bool // a reading to show, and Backlog set
		proxies          int
	}{
		{"no proxy", nil, proxyapi.AdmissionOpen, 0, 0, 0, "", false, false, 0},
		{"every proxy admits", views(open, open), proxyapi.AdmissionOpen, 0, 0, 0, "", false, false, 2},
		{"no metrics URL", views(noMetrics), proxyapi.AdmissionOpen, 0, 0, 0, "", false, false, 1},
		{"an old proxy admits", views(oldAdmitting), proxyapi.AdmissionOpen, 0, 0, 0, "", false, false, 1},
		{"one of two paces", views(open, paced(20, why)), proxyapi.AdmissionPaced, 0, 1, 20, why, true, false, 2},
		{"both pace: the rates add up, the first's reason", views(paced(20, why), paced(22, "other")), proxyapi.AdmissionPaced, 0, 2, 42, why, true, false, 2},
		{"paced without a rate yet", views(paced(20, why), paced(0, "")), proxyapi.AdmissionPaced, 0, 2, 0, why, true, false, 2},
		{"paced, no reason given", views(paced(0, "")), proxyapi.AdmissionPaced, 0, 1, 0, "queue 310ms over the 250ms target", true, false, 1},
		{"paced, nothing processed", views(shard(&proxyapi.BacklogStatus{Admitting: true, State: proxyapi.AdmissionPaced, QueueDelay: -1, QueueTarget: 0.25})),
			proxyapi.AdmissionPaced, 0, 1, 0, "records not processed at all over the 250ms target", true, false, 1},
		{"refusing over pacing", views(paced(20, why), backlog), proxyapi.AdmissionRefused, 1, 1, 20, "backlog 1.2k records (max 1.0k)", true, true, 2},
		{"refused for the instance limit", views(limit, open), proxyapi.AdmissionRefused, 1, 0, 0, "700 instances in flight, at its instance limit of 700 while congested", true, true, 2},
		{"an old proxy refuses", views(old, open), proxyapi.AdmissionRefused, 1, 0, 0, "backlog 1.2k records (max 1.0k), growing +12/s", true, true, 2},
		{"two refuse: the first by id", views(limit, backlog), proxyapi.AdmissionRefused, 2, 0, 0, "700 instances in flight, at its instance limit of 700 while congested", true, true, 2},
	} {
		h := Of(tc.views, "a")
		if h.AdmissionState() != tc.state || h.Refusing != tc.refusing || h.Paced != tc.paced || h.PacedRate != tc.rate ||
			h.AdmissionReason() != tc.reason || (h.Admission != nil) != tc.admission || (h.Backlog != nil) != tc.shown || h.Proxies != tc.proxies {
			t.Errorf("%s: %s, refusing %d, paced %d at %g/s, %q (reading %v, backlog %v, of %d); want %s, %d, %d at %g/s, %q (%v, %v, of %d)", tc.name,
				h.AdmissionState(), h.Refusing, h.Paced, h.PacedRate, h.AdmissionReason(), h.Admission != nil, h.Backlog != nil, h.Proxies,
				tc.state, tc.refusing, tc.paced, tc.rate, tc.reason, tc.admission, tc.shown, tc.proxies)
		}
	}
}
