package signals

import (
	"strings"
	"testing"
	"time"
)

// steady is a shard at 12.8 instances/s created and completed, sampled
// every 5 s from 10 minutes before now until `until` before now.
func steady(name string, now time.Time, until time.Duration) Shard {
	s := Shard{Name: name}
	for t := now.Add(-10 * time.Minute); !t.After(now.Add(-until)); t = t.Add(5 * time.Second) {
		s.Created = append(s.Created, Point{T: t, V: 12.8})
		s.Completed = append(s.Completed, Point{T: t, V: 12.8})
		s.Queue = append(s.Queue, Point{T: t, V: 10})
	}
	return s
}

// A shard whose metrics stopped is unknown: never ok, no numbers of its
// own, why in words; the whole and the level are of the others.
func TestStaleShards(t *testing.T) {
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name    string
		shard   Shard
		unknown bool
		reason  string
	}{
		{"fresh", steady("a", now, 0), false, ""},
		{"last sample 10 s ago", steady("a", now, 10*time.Second), false, ""},
		{"stopped 45 s ago", steady("a", now, 45*time.Second), true, "no metrics for 45s (since "},
		{"stopped, with why", func() Shard {
			s := steady("a", now, 45*time.Second)
			s.Missing = "scrape http://a/metrics: connection refused"
			return s
		}(), true, "connection refused"},
		{"never answered", Shard{Name: "a", Missing: "scrape http://a/metrics: connection refused"}, true, "no metrics in the window: scrape"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Evaluate([]Shard{tc.shard, steady("b", now, 0)}, now, 10*time.Minute, DefaultThresholds())
			a := r.Shards[0]
			if got := a.Level == Unknown; got != tc.unknown {
				t.Fatalf("level %s, unknown %v, want %v", a.Level, got, tc.unknown)
			}
			if !tc.unknown {
				if len(r.Unknown) != 0 || a.Level != OK {
					t.Errorf("a fresh shard: level %s, report unknown %v", a.Level, r.Unknown)
				}
				return
			}
			if len(r.Unknown) != 1 || r.Unknown[0] != "a" {
				t.Errorf("report unknown %v, want [a]", r.Unknown)
			}
			if a.CreatedPerSec != 0 || a.Ratio != nil || len(a.Reasons) != 1 || !strings.Contains(a.Reasons[0], tc.reason) {
				t.Errorf("signals %+v: want no numbers and a reason with %q", a, tc.reason)
			}
			if r.Level != OK || r.Overall.CreatedPerSec != 12.8 {
				t.Errorf("the whole: level %s, created %.1f/s: want b's alone", r.Level, r.Overall.CreatedPerSec)
			}
			if b, _ := Unknown.MarshalText(); string(b) != "unknown" {
				t.Errorf("unknown writes as %q", b)
			}
		})
	}
}

// A shard a proxy holds DOWN is DOWN in the snapshot, with the proxy's
// reason first; one the registry dropped is listed, unknown.
func TestHoldDown(t *testing.T) {
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	snap := Take([]Shard{steady("a", now, 0), steady("b", now, 0)}, now, 10*time.Minute, DefaultThresholds())
	snap.States = map[string]string{"a": "UP", "b": "UP"}
	snap.Federation = &Federation{Down: map[string]string{
		"a":    "a DOWN in 1 of 1 proxies (p: 2 health checks failed)",
		"gone": "gone DOWN in 1 of 1 proxies (p: not in the registry any more)",
	}}
	snap.HoldDown()
	if snap.States["a"] != "DOWN" || snap.States["gone"] != "DOWN" || snap.States["b"] != "UP" {
		t.Errorf("states %v", snap.States)
	}
	names := []string{}
	for _, s := range snap.Report.Shards {
		names = append(names, s.Name)
	}
	if strings.Join(names, ",") != "a,b,gone" || len(snap.Series) != 3 {
		t.Fatalf("shards %v (%d series), want a,b,gone", names, len(snap.Series))
	}
	if a := snap.Report.Shards[0]; !strings.HasPrefix(a.Reasons[0], "a DOWN") {
		t.Errorf("a's reasons %v: want the proxy's first", a.Reasons)
	}
	if g := snap.Report.Shards[2]; g.Level != Unknown || len(snap.Report.Unknown) != 1 || snap.Report.Unknown[0] != "gone" {
		t.Errorf("gone: %+v, unknown %v", g, snap.Report.Unknown)
	}
}

// The proxies' refusals are the federation's backpressure: past the drop
// share the whole warns, with why; under it nothing changes.
func TestCountRefusals(t *testing.T) {
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		share float64
		level Level
	}{{0.39, Warn}, {0.01, OK}} {
		snap := Take([]Shard{steady("a", now, 0)}, now, 10*time.Minute, DefaultThresholds())
		snap.Federation = &Federation{Refusals: &Refusals{AskedPerSec: 100, PerSec: 100 * tc.share, Share: tc.share}}
		snap.CountRefusals()
		all := snap.Report.Overall
		if all.Level != tc.level || snap.Report.Level != tc.level || all.DropShare != tc.share {
			t.Errorf("refused %.0f%%: level %s (report %s), drop share %.2f; want %s", tc.share*100, all.Level, snap.Report.Level, all.DropShare, tc.level)
		}
		if tc.level == Warn && (len(all.Reasons) == 0 || !strings.Contains(all.Reasons[len(all.Reasons)-1], "proxies refused 39%")) {
			t.Errorf("reasons %v: want the refusals named", all.Reasons)
		}
	}
}
