package observe

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/shardctl/shardctl/commands/output"
	"github.com/shardctl/shardctl/internal/signals"
)

// steady is a shard that creates and completes 10 instances a second
// over ten minutes: ok, with no reason of its own.
func steady(name string, now time.Time) signals.Shard {
	s := signals.Shard{Name: name}
	for t := now.Add(-10 * time.Minute); !t.After(now); t = t.Add(5 * time.Second) {
		s.Created = append(s.Created, signals.Point{T: t, V: 10})
		s.Completed = append(s.Completed, signals.Point{T: t, V: 10})
		s.Queue = append(s.Queue, signals.Point{T: t, V: 5})
	}
	return s
}

// `shardctl signals` says, in each shard's row, how the proxies admit it
// when they pace or refuse it (its reason in the table, all of them with
// -o wide), and carries the admission in its JSON.
func TestSignalsAdmission(t *testing.T) {
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	const why = "queue 310ms over the 250ms target: 20 new instances/s keep it there (100 records/s, 5.0 an instance)"
	snap := signals.Take([]signals.Shard{steady("a", now), steady("b", now), steady("c", now)}, now, 10*time.Minute, signals.DefaultThresholds())
	snap.Federation = &signals.Federation{
		Admission: map[string]signals.Admission{
			"a": {State: signals.AdmissionPaced, Reason: why, Proxies: 2, Of: 2, RatePerSec: 40},
			"b": {State: signals.AdmissionRefused, Reason: "backlog 1.2k records (max 1.0k), growing +12/s", Proxies: 1, Of: 2},
		},
		Proxies: map[string]int{"a": 2, "b": 2, "c": 2},
	}
	snap.NoteAdmission()
	for _, tc := range []struct {
		format output.Format
		want   []string // lines or fragments, in order
	}{
		{output.Table, []string{
			"\na ", "0%      a paced by 2 of 2 proxies to 40 new instances/s: " + why,
			"\nb ", "0%      b refused new instances by 1 of 2 proxies: backlog 1.2k records (max 1.0k), growing +12/s",
			"\nc ", "0%      -\n",
		}},
		{output.Wide, []string{"a paced by 2 of 2 proxies to 40 new instances/s: " + why, "b refused new instances by 1 of 2 proxies"}},
		{output.JSON, []string{`"name": "a"`, `"admission": {`, `"state": "pacing"`, `"ratePerSec": 40`, `"name": "b"`, `"state": "refusing"`, `"name": "c"`}},
	} {
		var out bytes.Buffer
		p := &output.Printer{Format: tc.format, Out: &out}
		if err := p.Print(SignalsView{snap.Report}); err != nil {
			t.Fatal(err)
		}
		text := out.String()
		at := 0
		for _, w := range tc.want {
			i := strings.Index(text[at:], w)
			if i < 0 {
				t.Errorf("%s: lacks %q after byte %d:\n%s", tc.format, w, at, text)
				break
			}
			at += i + len(w)
		}
		if tc.format == output.JSON {
			var r struct {
				Shards []struct {
					Name      string             `json:"name"`
					Admission *signals.Admission `json:"admission"`
				} `json:"shards"`
			}
			if err := json.Unmarshal(out.Bytes(), &r); err != nil {
				t.Fatal(err)
			}
			if len(r.Shards) != 3 || r.Shards[0].Admission == nil || r.Shards[0].Admission.Of != 2 || r.Shards[2].Admission != nil {
				t.Errorf("JSON shards %+v", r.Shards)
			}
		}
	}
}
