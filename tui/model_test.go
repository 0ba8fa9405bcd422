package tui

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/colorprofile"
	"github.com/charmbracelet/x/ansi"
	"github.com/charmbracelet/x/exp/golden"
	"github.com/charmbracelet/x/exp/teatest/v2"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/signals"
)

var now = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// recorded builds the series of two shards over ten minutes at 5 s: knee
// crosses its knee at minute 6 (the scissors open, the queue climbs, the
// latency mass moves to seconds); half runs steadily at half its capacity.
func recorded() []signals.Shard {
	bounds := []float64{0.001, 0.01, 0.1, 1, 5, 30, math.Inf(1)}
	mk := func(name string, knee bool) signals.Shard {
		s := signals.Shard{Name: name, Latency: signals.Heatmap{Bounds: bounds}}
		for i := 0; i <= 120; i++ {
			t := now.Add(-10 * time.Minute).Add(time.Duration(i) * 5 * time.Second)
			sec := float64(i * 5)
			created, completed, queue, bucket := 30.0, 30.0, 20.0, 1
			if knee {
				created, completed = 60+sec/10, 60+sec/10
				if sec >= 360 {
					created, completed = 120, 120*math.Max(0.05, 1-(sec-360)/120)
					queue = 20 + (sec-360)*100
					bucket = min(2+int(sec-360)/60, 5)
				}
			}
			s.Created = append(s.Created, signals.Point{T: t, V: created})
			s.Completed = append(s.Completed, signals.Point{T: t, V: completed})
			s.Queue = append(s.Queue, signals.Point{T: t, V: queue})
			counts := make([]float64, len(bounds))
			counts[bucket] = created
			s.Latency.Times = append(s.Latency.Times, t)
			s.Latency.Counts = append(s.Latency.Counts, counts)
		}
		return s
	}
	return []signals.Shard{mk("knee", true), mk("half", false)}
}

func snapshot() signals.Snapshot {
	s := signals.Take(recorded(), now, 10*time.Minute, signals.DefaultThresholds())
	s.States = map[string]string{"knee": "DRAINING", "half": "UP"}
	return s
}

func newTestModel(t *testing.T, fetch func(context.Context) (signals.Snapshot, error)) *teatest.TestModel {
	m := New(Options{Fetch: fetch, Refresh: time.Hour, Source: "zeebe via test", Window: 10 * time.Minute, Now: func() time.Time { return now }})
	return teatest.NewTestModel(t, m, teatest.WithInitialTermSize(100, 30),
		teatest.WithProgramOptions(tea.WithColorProfile(colorprofile.Ascii)))
}

func waitFor(t *testing.T, tm *teatest.TestModel, text string) {
	t.Helper()
	teatest.WaitFor(t, tm.Output(), func(b []byte) bool { return bytes.Contains(b, []byte(text)) },
		teatest.WithDuration(budget.Of(5*time.Second)), teatest.WithCheckInterval(10*time.Millisecond))
}

// screen is the final frame as text, without colour: the golden files
// show what a monochrome terminal shows.
func screen(t *testing.T, tm *teatest.TestModel) string {
	if err := tm.Quit(); err != nil {
		t.Fatal(err)
	}
	m := tm.FinalModel(t, teatest.WithFinalTimeout(budget.Of(5*time.Second))).(*Model)
	return ansi.Strip(m.View().Content)
}

func TestViews(t *testing.T) {
	ok := func(context.Context) (signals.Snapshot, error) { return snapshot(), nil }
	for _, tc := range []struct {
		name  string
		fetch func(context.Context) (signals.Snapshot, error)
		keys  func(tm *teatest.TestModel)
		want  []string // on the screen, besides the golden file
	}{
		{"overview", ok, nil, []string{"✖ crit", "✔ ok", "▓", "↗", "DRAIN"}},
		{"detail", ok, func(tm *teatest.TestModel) {
			tm.Send(tea.KeyPressMsg{Code: tea.KeyDown})
			tm.Send(tea.KeyPressMsg{Code: tea.KeyEnter})
		}, []string{"scissors", "○ completed/s", "heatmap", "≤30s", "queue growing linearly"}},
		{"help", ok, func(tm *teatest.TestModel) { tm.Type("?") }, []string{"keys", "pictures", "filter"}},
		{"filter", ok, func(tm *teatest.TestModel) { tm.Type("/hal") }, []string{"/hal", "half"}},
		{"sorted-by-level", ok, func(tm *teatest.TestModel) { tm.Type("s") }, []string{"sort: level"}},
		{"cutover", func(context.Context) (signals.Snapshot, error) {
			snap := snapshot()
			snap.Federation = &signals.Federation{Pools: map[string]string{"knee": "blue", "half": "green"},
				Weights:  map[string]int{"blue": 0, "green": 100},
				Cutover:  "blue-to-green Draining, step 5 of 6: drain blue",
				Draining: map[string]string{"knee": "shard knee: 412 instances in flight, 0 incidents, lag 0, ~3m left"}}
			return snap, nil
		}, nil, []string{"cutover blue-to-green Draining", "weights  blue 0% (knee) · green 100% (half)", "412 instances in flight"}},
		{"shard-down", func(context.Context) (signals.Snapshot, error) {
			snap := snapshot()
			snap.Federation = &signals.Federation{Pools: map[string]string{"knee": "blue", "half": "blue"},
				Down: map[string]string{"knee": "knee DOWN in 1 of 2 proxies (proxy-a: 2 health checks failed: connection refused)"}}
			snap.HoldDown()
			return snap, nil
		}, nil, []string{"knee DOWN in 1 of 2 proxies (proxy-a: 2 health checks failed", "knee       DOWN"}},
		{"shard-stale", func(context.Context) (signals.Snapshot, error) {
			// half's metrics stopped a minute ago: its last numbers are
			// not its numbers now.
			shards := recorded()
			for i := range shards {
				if shards[i].Name == "half" {
					cut := func(s signals.Series) signals.Series { return s[:len(s)-12] }
					h := &shards[i]
					h.Created, h.Completed, h.Queue = cut(h.Created), cut(h.Completed), cut(h.Queue)
					h.Latency.Times, h.Latency.Counts = h.Latency.Times[:len(h.Latency.Times)-12], h.Latency.Counts[:len(h.Latency.Counts)-12]
					h.Missing = "scrape http://half/metrics: connection refused"
				}
			}
			snap := signals.Take(shards, now, 10*time.Minute, signals.DefaultThresholds())
			snap.States = map[string]string{"knee": "UP", "half": "UP"}
			return snap, nil
		}, nil, []string{"? 1 stale", "half       UP    ? stale -"}},
		{"shard-evicted", func(context.Context) (signals.Snapshot, error) {
			// gone: the registry dropped it, its metrics are gone, a proxy
			// still routes its keys to it.
			snap := snapshot()
			snap.Federation = &signals.Federation{Pools: map[string]string{"knee": "blue", "half": "blue", "gone": "blue"},
				Down: map[string]string{"gone": "gone DOWN in 1 of 1 proxies (proxy-a: not in the registry any more)"}}
			snap.HoldDown()
			return snap, nil
		}, nil, []string{"gone       DOWN  ? stale", "not in the registry any more"}},
		{"proxy-refusals", func(context.Context) (signals.Snapshot, error) {
			snap := snapshot()
			snap.Federation = admitted(1, map[string]signals.Admission{"knee": {State: signals.AdmissionRefused, Reason: "backlog 1.2k records (max 1.0k)", Proxies: 1, Of: 1}})
			snap.Federation.Refusals = &signals.Refusals{AskedPerSec: 150, PerSec: 58.5, Share: 0.39, Shards: map[string]float64{"half": 0.02, "knee": 0}}
			return snap, nil
		}, nil, []string{"proxy refused 39% of new instances (58.5/s of 150/s)", " off ", " 2% "}},
		{"shard-refused", func(context.Context) (signals.Snapshot, error) {
			snap := snapshot()
			snap.Federation = admitted(2, map[string]signals.Admission{"knee": {State: signals.AdmissionRefused, Reason: "backlog 1.2k records (max 1.0k), growing +12/s", Proxies: 2, Of: 2}})
			return snap, nil
		}, nil, []string{"knee refused new instances by 2 of 2 proxies: backlog 1.2k records (max 1.0k), growing +12/s", "off  off", "100%  -    open"}},
		{"shard-paced", paced, nil, []string{
			"knee paced by 2 of 2 proxies to 40 new instances/s: queue 310ms over the 250ms target",
			"ADMIT", "5%    -    ≤40/s", "100%  -    open"}},
		{"shard-paced-detail", paced, func(tm *teatest.TestModel) {
			tm.Send(tea.KeyPressMsg{Code: tea.KeyDown})
			tm.Send(tea.KeyPressMsg{Code: tea.KeyEnter})
		}, []string{"  • knee paced by 2 of 2 proxies to 40 new instances/s: queue 310ms over the 250ms", "(200 records/s, 5.0 an instance)", "  • scissors"}},
		{"error", func(context.Context) (signals.Snapshot, error) {
			return signals.Snapshot{}, errors.New(`prometheus: Get "http://prometheus:9090/api/v1/query": connection refused`)
		}, nil, []string{"no data yet", "connection refused", "retry 1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tm := newTestModel(t, tc.fetch)
			// One wait: it reads the output, and a static screen writes no more.
			if tc.name != "error" {
				waitFor(t, tm, "SHARD")
			} else {
				waitFor(t, tm, "retry")
			}
			if tc.keys != nil {
				// Keys and the quit that screen sends share the program's
				// one message queue: the final model has seen every key.
				tc.keys(tm)
			}
			got := screen(t, tm)
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("the screen lacks %q:\n%s", w, got)
				}
			}
			if tc.name == "filter" && strings.Contains(got, "knee ") {
				t.Errorf("the filter /hal still lists knee:\n%s", got)
			}
			golden.RequireEqual(t, got)
		})
	}
}

// paced is the snapshot of a federation whose two proxies pace knee and
// admit half, as `shardctl top --registry` takes it.
func paced(context.Context) (signals.Snapshot, error) {
	snap := snapshot()
	snap.Federation = admitted(2, map[string]signals.Admission{"knee": {State: signals.AdmissionPaced, Proxies: 2, Of: 2, RatePerSec: 40,
		Reason: "queue 310ms over the 250ms target: 20 new instances/s keep it there (200 records/s, 5.0 an instance)"}})
	snap.NoteAdmission()
	return snap, nil
}

// admitted is a federation of knee and half, in pool blue, whose n
// proxies route to both and admit them but as admission says, with the
// lines FederationOf writes.
func admitted(n int, admission map[string]signals.Admission) *signals.Federation {
	f := &signals.Federation{Pools: map[string]string{"knee": "blue", "half": "blue"}, Proxies: map[string]int{"knee": n, "half": n}, Admission: admission}
	for shard, a := range admission {
		lines := &f.Paced
		if a.State == signals.AdmissionRefused {
			lines = &f.Refused
		}
		if *lines == nil {
			*lines = map[string]string{}
		}
		(*lines)[shard] = a.Line(shard)
	}
	return f
}

// The ADMIT cell: "-" where no proxy speaks of a shard, open, the paced
// rate (the unit when it fits), or off.
func TestAdmitCell(t *testing.T) {
	for _, tc := range []struct {
		name string
		fed  *signals.Federation
		want string
	}{
		{"no registry", nil, "-"},
		{"no proxy routes to it", &signals.Federation{}, "-"},
		{"every proxy admits it", admitted(2, nil), "open"},
		{"refused", admitted(2, map[string]signals.Admission{"knee": {State: signals.AdmissionRefused, Proxies: 1, Of: 2}}), "off"},
		{"paced", admitted(2, map[string]signals.Admission{"knee": {State: signals.AdmissionPaced, Proxies: 2, Of: 2, RatePerSec: 40}}), "≤40/s"},
		{"paced slowly", admitted(2, map[string]signals.Admission{"knee": {State: signals.AdmissionPaced, Proxies: 2, Of: 2, RatePerSec: 2.46}}), "≤2.5/s"},
		{"paced at 120/s", admitted(2, map[string]signals.Admission{"knee": {State: signals.AdmissionPaced, Proxies: 2, Of: 2, RatePerSec: 120}}), "≤120/s"},
		{"paced past the width", admitted(2, map[string]signals.Admission{"knee": {State: signals.AdmissionPaced, Proxies: 1, Of: 2, RatePerSec: 1234}}), "≤1.2k"},
		{"paced, no rate yet", admitted(2, map[string]signals.Admission{"knee": {State: signals.AdmissionPaced, Proxies: 1, Of: 2}}), "paced"},
	} {
		snap := snapshot()
		snap.Federation = tc.fed
		m := New(Options{Window: 10 * time.Minute, Now: func() time.Time { return now }})
		m.Update(snapshotMsg{snap: snap})
		got := m.admit("knee")
		if ansi.Strip(got) != tc.want || ansi.StringWidth(got) > wAdmit {
			t.Errorf("%s: %q, want %q within %d cells", tc.name, ansi.Strip(got), tc.want, wAdmit)
		}
		if warn := got != ansi.Strip(got); warn != (tc.want != "-" && tc.want != "open") {
			t.Errorf("%s: %q in the warning colour: %v", tc.name, got, warn)
		}
	}
}

// The overview's columns fill the width, never more, with ADMIT beside
// REF: the queue's strip goes first when the room is short.
func TestLayout(t *testing.T) {
	for _, tc := range []struct {
		width                               int
		name, scissors, queue, heat, reason int
	}{
		{80, 10, 5, 0, 5, 0},
		{90, 10, 10, 0, 10, 0},
		{91, 10, 9, 5, 6, 0},
		{100, 10, 13, 7, 9, 0},
		{120, 14, 13, 7, 9, 15},
		{200, 14, 36, 20, 25, 43},
	} {
		c := layout(tc.width)
		want := columns{name: tc.name, scissors: tc.scissors, queue: tc.queue, heat: tc.heat, reason: tc.reason}
		if c != want {
			t.Errorf("%d: %+v, want %+v", tc.width, c, want)
		}
	}
	for width := 80; width <= 240; width++ {
		c := layout(width)
		used, cells := c.name+fixed+c.scissors+c.heat, 11
		for _, w := range []int{c.queue, c.reason} {
			if w > 0 {
				used, cells = used+w, cells+1
			}
		}
		if used+cells-1 != width {
			t.Errorf("%d: the columns take %d: %+v", width, used+cells-1, c)
		}
	}
}

// The screen fits the terminal exactly at every size, 80×24 and up.
func TestSizes(t *testing.T) {
	note := func() string {
		return "scenario: 12:00:10 load raised to 80 instances/s, a note longer than the narrowest screen is wide"
	}
	withProxies, _ := paced(context.Background())
	for _, size := range [][2]int{{80, 24}, {99, 30}, {100, 30}, {120, 40}, {200, 50}} {
		m := New(Options{Fetch: func(context.Context) (signals.Snapshot, error) { return snapshot(), nil }, Window: 10 * time.Minute,
			Now: func() time.Time { return now }, Note: note})
		m.Update(tea.WindowSizeMsg{Width: size[0], Height: size[1]})
		m.Update(snapshotMsg{snap: withProxies})
		for _, v := range []view{overview, detail, helpView} {
			m.view = v
			m.frame++
			lines := strings.Split(m.View().Content, "\n")
			if len(lines) != size[1] {
				t.Errorf("%dx%d view %d: %d lines", size[0], size[1], v, len(lines))
			}
			if !strings.Contains(ansi.Strip(lines[len(lines)-2]), "scenario: 12:00:10 load raised") {
				t.Errorf("%dx%d view %d: the note is not above the status line: %q", size[0], size[1], v, ansi.Strip(lines[len(lines)-2]))
			}
			for i, l := range lines {
				if w := ansi.StringWidth(l); w > size[0] {
					t.Errorf("%dx%d view %d line %d is %d wide: %q", size[0], size[1], v, i, w, ansi.Strip(l))
				}
			}
		}
	}
}

// BenchmarkRender draws one overview and one detail frame of 16 shards at
// 200×50, as `shardctl top` does on every change (target: ≤ 10 ms).
func BenchmarkRender(b *testing.B) {
	var shards []signals.Shard
	for i := range 8 {
		for _, s := range recorded() {
			s.Name = fmt.Sprintf("%s-%02d", s.Name, i)
			shards = append(shards, s)
		}
	}
	snap := signals.Take(shards, now, 10*time.Minute, signals.DefaultThresholds())
	for _, v := range []view{overview, detail} {
		b.Run([]string{"overview", "detail"}[v], func(b *testing.B) {
			m := New(Options{Window: 10 * time.Minute, Now: func() time.Time { return now }})
			m.Update(tea.WindowSizeMsg{Width: 200, Height: 50})
			m.Update(snapshotMsg{snap: snap})
			m.view = v
			for b.Loop() {
				m.frame++
				_ = m.View()
			}
		})
	}
}

// A source that fails keeps the last picture on screen, says why in the
// status line, and is asked again later and later until it answers.
func TestFetchErrorsKeepThePictureAndBackOff(t *testing.T) {
	m := New(Options{Refresh: 2 * time.Second, Window: 10 * time.Minute, Now: func() time.Time { return now }})
	m.Update(tea.WindowSizeMsg{Width: 100, Height: 30})
	m.Update(snapshotMsg{snap: snapshot()})
	down := errors.New("prometheus: connection refused")
	var delays []time.Duration
	for range 6 {
		m.fetching = true
		m.Update(snapshotMsg{err: down})
		delays = append(delays, m.delay())
	}
	screen := ansi.Strip(m.View().Content)
	if !strings.Contains(screen, "knee") || !strings.Contains(screen, "connection refused (retry 6)") {
		t.Errorf("the last picture or the error is gone:\n%s", screen)
	}
	for i := 1; i < len(delays); i++ {
		if delays[i] < delays[i-1] || delays[i] > 30*time.Second {
			t.Errorf("retry delays %v: want them growing, at most 30s", delays)
			break
		}
	}
	if delays[0] <= 2*time.Second || delays[len(delays)-1] != 30*time.Second {
		t.Errorf("retry delays %v: want more than the refresh at once, 30s at most", delays)
	}
	m.fetching = true
	m.Update(snapshotMsg{snap: snapshot()})
	if m.err != nil || m.failures != 0 || m.delay() != 2*time.Second {
		t.Errorf("after the source came back: err %v, failures %d, delay %v", m.err, m.failures, m.delay())
	}
	m.Update(tea.BlurMsg{})
	if m.delay() != 8*time.Second {
		t.Errorf("unfocused delay %v, want 4x the refresh", m.delay())
	}
}

// The strip shades by the thresholds of the snapshot, not by its own.
func TestScissorsFollowTheThresholds(t *testing.T) {
	created, completed := []float64{100, 100, 100}, []float64{100, 85, 40}
	strict := signals.DefaultThresholds()
	strict.PlanRatio, strict.ActRatio = 0.9, 0.6
	for _, tc := range []struct {
		name string
		th   signals.Thresholds
		want []int
	}{
		{"default", signals.DefaultThresholds(), []int{gapNone, gapNone, gapAct}},
		{"strict", strict, []int{gapNone, gapPlan, gapAct}},
	} {
		_, gaps := scissorsStrip(created, completed, tc.th, 100)
		if fmt.Sprint(gaps) != fmt.Sprint(tc.want) {
			t.Errorf("%s: gaps %v, want %v", tc.name, gaps, tc.want)
		}
	}
}
