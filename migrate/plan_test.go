package migrate

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/shardctl/shardctl/internal/proxy/proxyapi"
	"github.com/shardctl/shardctl/internal/registry/registryapi"
	"github.com/shardctl/shardctl/internal/signals"
	"github.com/shardctl/shardctl/migrate/kube"
	"github.com/shardctl/shardctl/probes/proxies"
)

// The steps of a plan, with and without the clients step of --mode k8s.
func TestPlanSteps(t *testing.T) {
	k8s := &kube.Spec{Namespace: "zeebe", Service: "zeebe-gateway", Selector: map[string]string{"app": "proxy"}}
	for _, tt := range []struct {
		name  string
		plan  Plan
		names []string
	}{
		{"registry", Plan{From: "blue", To: "green", Steps: []int{10, 50, 100}},
			[]string{"preflight", "weights: green 10%", "weights: green 50%", "promote: green 100%", "drain blue", "done"}},
		{"k8s", Plan{From: "blue", To: "green", Steps: []int{50, 100}, Kube: k8s},
			[]string{"preflight", "clients: service zeebe-gateway → app=proxy", "weights: green 50%", "promote: green 100%", "drain blue", "done"}},
		{"k8s, one step", Plan{From: "blue", To: "green", Steps: []int{100}, Kube: k8s},
			[]string{"preflight", "clients: service zeebe-gateway → app=proxy", "promote: green 100%", "drain blue", "done"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.plan.Total(); got != len(tt.names) {
				t.Errorf("Total %d, want %d", got, len(tt.names))
			}
			for k, want := range tt.names {
				if got := tt.plan.StepName(k); got != want {
					t.Errorf("step %d: %q, want %q", k, got, want)
				}
			}
			// The weights of each weight step, from its own index.
			for k := range tt.names {
				if kind, j := tt.plan.stepAt(k); kind == stepWeights {
					if w := tt.plan.weightsAt(j); w["green"] != tt.plan.Steps[j-1] || w["blue"] != 100-tt.plan.Steps[j-1] {
						t.Errorf("step %d: weights %v", k, w)
					}
				}
			}
		})
	}
}

func TestKubeSpecValidate(t *testing.T) {
	ok := kube.Spec{Namespace: "zeebe", Service: "s", Selector: map[string]string{"app": "proxy"}}
	for _, tt := range []struct {
		name string
		edit func(*kube.Spec)
		err  string
	}{
		{"ok", func(*kube.Spec) {}, ""},
		{"no namespace", func(s *kube.Spec) { s.Namespace = "" }, "no namespace"},
		{"bad label", func(s *kube.Spec) { s.Selector = map[string]string{"a b": "x"} }, `label "a b"`},
		{"bad value", func(s *kube.Spec) { s.Selector = map[string]string{"app": "a b"} }, `value "a b"`},
		{"config without key", func(s *kube.Spec) { s.ConfigMap = "c" }, "need --key and --value"},
		{"restart ref", func(s *kube.Spec) { s.Restart = []string{"deploy/a/b"} }, "want TYPE/NAME"},
	} {
		s := ok
		tt.edit(&s)
		err := s.Validate()
		if (tt.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.err)) {
			t.Errorf("%s: %v, want %q", tt.name, err, tt.err)
		}
	}
	if err := kube.ValidLeaseName("Blue_To_Green"); err == nil {
		t.Error("a cutover name no Lease can carry was accepted")
	}
}

// What a resumed cutover would not take from a new command line, by
// option; a Kubernetes step field by field, as the flags set it.
func TestPlanDifferences(t *testing.T) {
	k8s := func(change func(*kube.Spec)) *kube.Spec {
		s := &kube.Spec{Namespace: "zeebe", Service: "zeebe-gateway", Selector: map[string]string{"app": "proxy"}, Restart: []string{"deploy/w"}}
		if change != nil {
			change(s)
		}
		return s
	}
	base := Plan{From: "blue", To: "green", Steps: []int{10, 100}, StepPause: 60, PauseBefore: "", Gates: DefaultGates()}
	for _, tt := range []struct {
		name   string
		change func(*Plan)
		want   []string
	}{
		{"the same", func(*Plan) {}, nil},
		{"steps and pause", func(p *Plan) { p.Steps = []int{50, 100}; p.PauseBefore = PausePromote }, []string{"steps", "pauseBefore"}},
		{"drain timeout", func(p *Plan) { p.DrainTimeout = 5 }, []string{"drainTimeout"}},
		{"gates", func(p *Plan) { p.Gates = nil }, []string{"gates"}},
		{"a Kubernetes step added", func(p *Plan) { p.Kube = k8s(nil) }, []string{"kube"}},
		{"the restarts of a Kubernetes step", func(p *Plan) { p.Kube = k8s(func(s *kube.Spec) { s.Restart = []string{"deploy/x"} }) }, []string{"kube.restart"}},
		{"a Kubernetes step's rollout timeout", func(p *Plan) { p.Kube = k8s(func(s *kube.Spec) { s.RolloutTimeout = 5 }) }, []string{"kube.rolloutTimeout"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p, q := base, base
			if strings.HasPrefix(tt.name, "the restarts") || strings.HasPrefix(tt.name, "a Kubernetes step's") {
				p.Kube = k8s(nil)
			}
			tt.change(&q)
			if got := p.Differences(q); strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Errorf("Differences = %v, want %v", got, tt.want)
			}
		})
	}
}

// noCutovers is a registry without cutovers: all FederationOf asks of
// one beside the shards.
type noCutovers struct{ CutoverRegistry }

func (noCutovers) Cutovers(context.Context, string) ([]registryapi.Cutover, error) { return nil, nil }

// FederationOf says, by shard, how the proxies admit new instances: only
// the shards they pace or refuse are in Admission (refusing over pacing,
// the rates of the pacing proxies summed), each with its line in Paced or
// Refused; Proxies counts those that route to each shard.
func TestFederationAdmission(t *testing.T) {
	const why = "queue 310ms over the 250ms target: 20 new instances/s keep it there (100 records/s, 5.0 an instance)"
	status := func(id string, b *proxyapi.BacklogStatus) proxyapi.ShardStatus {
		return proxyapi.ShardStatus{ID: id, Health: proxyapi.ShardHealth{Up: true}, Backlog: b}
	}
	open := &proxyapi.BacklogStatus{Admitting: true, State: proxyapi.AdmissionOpen}
	paced := func(rate float64) *proxyapi.BacklogStatus {
		return &proxyapi.BacklogStatus{Admitting: true, State: proxyapi.AdmissionPaced, AdmitRate: rate, Reason: why}
	}
	backlog := &proxyapi.BacklogStatus{Records: 1234, Max: 1000, State: proxyapi.AdmissionRefused, Reason: "backlog 1.2k records (max 1.0k)"}
	old := &proxyapi.BacklogStatus{Records: 1234, Max: 1000, Growing: true, Slope: 12.4} // a proxy older than pacing
	for _, tc := range []struct {
		name      string
		views     []proxies.View
		admission map[string]signals.Admission
		lines     map[string]string // Paced and Refused together
		proxies   map[string]int
	}{
		{"no proxy", nil, nil, nil, nil},
		{"every proxy admits", []proxies.View{
			{Proxy: "p", Shards: []proxyapi.ShardStatus{status("a", open), status("b", nil)}},
			{Proxy: "q", Shards: []proxyapi.ShardStatus{status("a", open)}},
		}, nil, nil, map[string]int{"a": 2, "b": 1}},
		{"both pace a: the rates add up", []proxies.View{
			{Proxy: "p", Shards: []proxyapi.ShardStatus{status("a", paced(20)), status("b", open)}},
			{Proxy: "q", Shards: []proxyapi.ShardStatus{status("a", paced(20)), status("b", open)}},
		}, map[string]signals.Admission{"a": {State: signals.AdmissionPaced, Reason: why, Proxies: 2, Of: 2, RatePerSec: 40}},
			map[string]string{"a": "a paced by 2 of 2 proxies to 40 new instances/s: " + why}, map[string]int{"a": 2, "b": 2}},
		{"one of two paces, before its rate is known", []proxies.View{
			{Proxy: "p", Shards: []proxyapi.ShardStatus{status("a", open)}},
			{Proxy: "q", Shards: []proxyapi.ShardStatus{status("a", &proxyapi.BacklogStatus{Admitting: true, State: proxyapi.AdmissionPaced, QueueDelay: 0.31, QueueTarget: 0.25})}},
		}, map[string]signals.Admission{"a": {State: signals.AdmissionPaced, Reason: "queue 310ms over the 250ms target", Proxies: 1, Of: 2}},
			map[string]string{"a": "a paced by 1 of 2 proxies: queue 310ms over the 250ms target"}, map[string]int{"a": 2}},
		{"refused over paced", []proxies.View{
			{Proxy: "p", Shards: []proxyapi.ShardStatus{status("a", paced(20))}},
			{Proxy: "q", Shards: []proxyapi.ShardStatus{status("a", backlog)}},
		}, map[string]signals.Admission{"a": {State: signals.AdmissionRefused, Reason: "backlog 1.2k records (max 1.0k)", Proxies: 1, Of: 2}},
			map[string]string{"a": "a refused new instances by 1 of 2 proxies: backlog 1.2k records (max 1.0k)"}, map[string]int{"a": 2}},
		{"an old proxy refuses b, a new one paces a", []proxies.View{
			{Proxy: "p", Shards: []proxyapi.ShardStatus{status("a", paced(12.5)), status("b", old)}},
		}, map[string]signals.Admission{
			"a": {State: signals.AdmissionPaced, Reason: why, Proxies: 1, Of: 1, RatePerSec: 12.5},
			"b": {State: signals.AdmissionRefused, Reason: "backlog 1.2k records (max 1.0k), growing +12/s", Proxies: 1, Of: 1},
		}, map[string]string{
			"a": "a paced by 1 of 1 proxies to 12 new instances/s: " + why,
			"b": "b refused new instances by 1 of 1 proxies: backlog 1.2k records (max 1.0k), growing +12/s",
		}, map[string]int{"a": 1, "b": 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			shards := []registryapi.Shard{{ID: "a"}, {ID: "b"}}
			f, err := FederationOf(context.Background(), noCutovers{}, "shards", shards, tc.views)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(f.Admission, tc.admission) {
				t.Errorf("admission %+v, want %+v", f.Admission, tc.admission)
			}
			if !reflect.DeepEqual(f.Proxies, tc.proxies) {
				t.Errorf("proxies %v, want %v", f.Proxies, tc.proxies)
			}
			lines := map[string]string{}
			maps.Copy(lines, f.Paced)
			maps.Copy(lines, f.Refused)
			if len(tc.lines) == 0 && len(lines) == 0 {
				return
			}
			if !reflect.DeepEqual(lines, tc.lines) {
				t.Errorf("lines %q, want %q", lines, tc.lines)
			}
			for id := range f.Paced {
				if f.Admission[id].State != signals.AdmissionPaced || f.Refused[id] != "" {
					t.Errorf("%s is in Paced as %s", id, f.Admission[id].State)
				}
			}
			for _, id := range slices.Sorted(maps.Keys(f.Refused)) {
				if f.Admission[id].State != signals.AdmissionRefused {
					t.Errorf("%s is in Refused as %s", id, f.Admission[id].State)
				}
			}
		})
	}
	// The model names the states as the proxies do.
	if fmt.Sprint(signals.AdmissionOpen, signals.AdmissionPaced, signals.AdmissionRefused) !=
		fmt.Sprint(proxyapi.AdmissionOpen, proxyapi.AdmissionPaced, proxyapi.AdmissionRefused) {
		t.Errorf("signals names the admission states %q, %q, %q; the proxies %q, %q, %q", signals.AdmissionOpen, signals.AdmissionPaced,
			signals.AdmissionRefused, proxyapi.AdmissionOpen, proxyapi.AdmissionPaced, proxyapi.AdmissionRefused)
	}
}
