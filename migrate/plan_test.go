package migrate

import (
	"strings"
	"testing"

	"github.com/shardctl/shardctl/migrate/kube"
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
