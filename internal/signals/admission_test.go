package signals

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// An admission reads as one line, named by shard, as FederationOf writes
// Refused and Paced.
func TestAdmissionLine(t *testing.T) {
	const why = "queue 310ms over the 250ms target: 20 new instances/s keep it there (100 records/s, 5.0 an instance)"
	for _, tc := range []struct {
		name string
		a    Admission
		want string
	}{
		{"refused", Admission{State: AdmissionRefused, Reason: "backlog 1.2k records (max 1.0k), growing +12/s", Proxies: 1, Of: 2},
			"b refused new instances by 1 of 2 proxies: backlog 1.2k records (max 1.0k), growing +12/s"},
		{"paced", Admission{State: AdmissionPaced, Reason: why, Proxies: 2, Of: 2, RatePerSec: 40},
			"b paced by 2 of 2 proxies to 40 new instances/s: " + why},
		{"paced slowly", Admission{State: AdmissionPaced, Reason: why, Proxies: 1, Of: 1, RatePerSec: 2.46},
			"b paced by 1 of 1 proxies to 2.5 new instances/s: " + why},
		{"paced fast", Admission{State: AdmissionPaced, Reason: why, Proxies: 3, Of: 3, RatePerSec: 1234},
			"b paced by 3 of 3 proxies to 1.2k new instances/s: " + why},
		{"paced, no rate yet", Admission{State: AdmissionPaced, Reason: "queue 310ms over the 250ms target", Proxies: 1, Of: 2},
			"b paced by 1 of 2 proxies: queue 310ms over the 250ms target"},
	} {
		if got := tc.a.Line("b"); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// A shard the proxies pace or refuse says so in the report: its
// admission, and its line among its reasons, after the DOWN line and
// before the level's own; the others are left as they were.
func TestNoteAdmission(t *testing.T) {
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	paced := Admission{State: AdmissionPaced, Reason: "queue 310ms over the 250ms target", Proxies: 2, Of: 2, RatePerSec: 40}
	refused := Admission{State: AdmissionRefused, Reason: "backlog 1.2k records (max 1.0k)", Proxies: 1, Of: 2}
	snap := Take([]Shard{steady("a", now, 0), steady("b", now, 0), steady("c", now, 0), steady("d", now, time.Minute)}, now, 10*time.Minute, DefaultThresholds())
	snap.Federation = &Federation{
		Down:      map[string]string{"b": "b DOWN in 1 of 2 proxies (p: 2 health checks failed)"},
		Admission: map[string]Admission{"a": paced, "b": refused, "d": paced, "gone": refused},
		Proxies:   map[string]int{"a": 2, "b": 2, "c": 2, "d": 2},
	}
	snap.HoldDown()
	snap.NoteAdmission()
	for _, tc := range []struct {
		shard     string
		admission *Admission
		reasons   []string // the first ones
	}{
		{"a", &paced, []string{paced.Line("a")}},
		{"b", &refused, []string{snap.Federation.Down["b"], refused.Line("b")}},
		{"c", nil, nil},
		{"d", &paced, []string{paced.Line("d"), "no metrics for 1m"}}, // stale: the level's reason after
	} {
		var sig *Signals
		for i := range snap.Report.Shards {
			if snap.Report.Shards[i].Name == tc.shard {
				sig = &snap.Report.Shards[i]
			}
		}
		if sig == nil {
			t.Fatalf("%s is not in the report", tc.shard)
		}
		if (sig.Admission == nil) != (tc.admission == nil) || sig.Admission != nil && *sig.Admission != *tc.admission {
			t.Errorf("%s: admission %+v, want %+v", tc.shard, sig.Admission, tc.admission)
		}
		if len(sig.Reasons) < len(tc.reasons) {
			t.Fatalf("%s: reasons %q, want %q first", tc.shard, sig.Reasons, tc.reasons)
		}
		for i, want := range tc.reasons {
			if !strings.HasPrefix(sig.Reasons[i], want) {
				t.Errorf("%s: reason %d is %q, want %q", tc.shard, i, sig.Reasons[i], want)
			}
		}
		if tc.admission == nil && len(sig.Reasons) > 0 && strings.Contains(sig.Reasons[0], "proxies") {
			t.Errorf("%s: reasons %q", tc.shard, sig.Reasons)
		}
		b, _ := json.Marshal(sig)
		if has := strings.Contains(string(b), `"admission":`); has != (tc.admission != nil) {
			t.Errorf("%s: JSON %s", tc.shard, b)
		}
	}
	if len(snap.Report.Shards) != 4 {
		t.Errorf("shards %d: a shard only the admission names is not added", len(snap.Report.Shards))
	}
	b, _ := json.Marshal(snap.Report.Shards[0])
	if !strings.Contains(string(b), `"admission":{"state":"pacing","reason":"queue 310ms over the 250ms target","proxies":2,"of":2,"ratePerSec":40}`) {
		t.Errorf("a's JSON: %s", b)
	}
}
