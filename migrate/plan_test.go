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
