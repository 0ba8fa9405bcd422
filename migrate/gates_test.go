package migrate

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestJudge(t *testing.T) {
	g := func(success, failure, noData string) *Gate {
		x := &Gate{Name: "g", Signal: "level", SuccessCondition: success, FailureCondition: failure, NoData: noData}
		if err := x.Compile(); err != nil {
			t.Fatal(err)
		}
		return x
	}
	now := time.Unix(0, 0)
	tests := []struct {
		name   string
		gate   *Gate
		result []float64
		err    error
		want   string
	}{
		{"failure met", g("", "result[0] >= 2", ""), []float64{2}, nil, Failed},
		{"failure not met", g("", "result[0] >= 2", ""), []float64{1}, nil, Successful},
		{"success met", g("result[0] < 0.05", "", ""), []float64{0.01}, nil, Successful},
		{"success not met", g("result[0] < 0.05", "", ""), []float64{0.2}, nil, Failed},
		{"neither met", g("result[0] < 1", "result[0] > 5", ""), []float64{3}, nil, Inconclusive},
		{"no data, fail", g("result[0] < 1", "", "fail"), nil, nil, Failed},
		{"no data, inconclusive", g("result[0] < 1", "", "inconclusive"), []float64{}, nil, Inconclusive},
		{"no data, pass", g("result[0] < 1", "", "pass"), nil, nil, Successful},
		{"query error", g("result[0] < 1", "", ""), nil, errors.New("prometheus: down"), Errored},
		{"index out of range", g("result[1] < 1", "", ""), []float64{0}, nil, Errored},
	}
	for _, tt := range tests {
		if m := tt.gate.Judge("q", tt.result, tt.err, now); m.Phase != tt.want {
			t.Errorf("%s: %s (%s), want %s", tt.name, m.Phase, m.Message, tt.want)
		}
	}
}

// Failures beyond failureLimit and errors beyond consecutiveErrorLimit
// fail a gate, as in Argo's analysis.
func TestTally(t *testing.T) {
	g := &Gate{Name: "g", Signal: "level", FailureLimit: 1, ConsecutiveErrorLimit: 2}
	if err := g.Compile(); err != nil {
		t.Fatal(err)
	}
	var tl tally
	for i, tc := range []struct {
		phase string
		fail  bool
	}{{Failed, false}, {Errored, false}, {Errored, false}, {Successful, false}, {Failed, true}} {
		if failed, why := tl.add(g, Measurement{Phase: tc.phase}); failed != tc.fail {
			t.Errorf("measurement %d (%s): failed %v (%s), want %v", i, tc.phase, failed, why, tc.fail)
		}
	}
	var errs tally
	for i := range 3 {
		failed, _ := errs.add(g, Measurement{Phase: Errored, Message: "down"})
		if failed != (i == 2) {
			t.Errorf("error %d: failed %v", i+1, failed)
		}
	}
}

// The default gate is compiled and fails on a critical target pool.
func TestDefaultGates(t *testing.T) {
	gates := DefaultGates()
	if err := gates[0].Compile(); err != nil {
		t.Fatal(err)
	}
	if m := gates[0].Judge("q", []float64{2}, nil, time.Now()); m.Phase != Failed {
		t.Errorf("critical: %s", m.Phase)
	}
}

func TestLoadGatesErrors(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{"gates:\n- name: x\n  signall: level\n", `g.yaml:3:3: unknown field "signall"`},
		{"gates:\n- name: x\n  signal: level\n  query: up\n", "one of them"},
		{"gates:\n- name: x\n  signal: nope\n", "unknown signal"},
		{"gates:\n- name: x\n  signal: level\n  noData: maybe\n", "noData"},
		{"gates:\n- name: x\n  signal: level\n  successCondition: result[0] >< 1\n", "successCondition"},
		{"gates:\n- name: x\n  query: up{{\n", "query"},
		{"gates: []\n", "no gates"},
		{"gates:\n- signal: level\n", "without a name"},
	} {
		p := filepath.Join(t.TempDir(), "g.yaml")
		if err := os.WriteFile(p, []byte(tc.body), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadGates(p); err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%q: %v, want one line with %q", tc.body, err, tc.want)
		}
	}
}
