package signals

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/shardctl/shardctl/internal/human"
)

// Shard is what a source fetched for one shard (or the whole).
type Shard struct {
	Name      string
	Created   Series // process instances created per second
	Completed Series // process instances completed per second
	Queue     Series // records appended but not yet processed
	Latency   Heatmap
	Dropped   Series // requests refused by backpressure per second
	Received  Series // requests received per second
	// Throttled are the refused requests that met flow control's
	// write-rate limit (8.6+: zeebe_flow_control_total, outcome
	// writeRateLimitExhausted), per second: part of Dropped, refused for
	// what the log may take (exporting behind, a configured write rate)
	// rather than for processing latency.
	Throttled Series
	// Missing says why the source has nothing of the shard now (its
	// scrape failed), "" when it answered.
	Missing string
	// MetricNames is the generation of Zeebe's metric names the shard
	// exports ("8.5", or "8.6+" for Micrometer's), "" when the source
	// cannot tell.
	MetricNames string
}

// Level is how bad it is.
type Level int

// Levels, in order. Unknown is a shard whose metrics stopped: below ok,
// so that the worst level is of the shards that can be read, and never
// ok, so that no gate passes on it.
const (
	Unknown Level = iota - 1
	OK
	Warn
	Critical
)

func (l Level) String() string {
	switch l {
	case Unknown:
		return "unknown"
	case Warn:
		return "warn"
	case Critical:
		return "critical"
	}
	return "ok"
}

// MarshalText writes ok, warn or critical.
func (l Level) MarshalText() ([]byte, error) { return []byte(l.String()), nil }

// UnmarshalText reads ok, warn or critical.
func (l *Level) UnmarshalText(b []byte) (err error) {
	*l, err = ParseLevel(string(b))
	return err
}

// ParseLevel reads ok, warn or critical.
func ParseLevel(s string) (Level, error) {
	switch strings.ToLower(s) {
	case "ok":
		return OK, nil
	case "warn", "warning":
		return Warn, nil
	case "critical":
		return Critical, nil
	case "unknown":
		return Unknown, nil
	}
	return OK, fmt.Errorf("level %q: want ok, warn or critical", s)
}

// Thresholds are the advisor's triggers. The defaults are the published
// lesson: plan federation when completion stays below 80% of creation; act
// when it is below 50%, when p99 is over a second, or when the queue grows
// linearly.
type Thresholds struct {
	PlanRatio, ActRatio float64       // completion ÷ creation
	PlanAfter, ActAfter time.Duration // how long the ratio must stay below
	P99                 float64       // seconds
	// Queue growth: a least-squares slope with at least this R², adding at
	// least QueueMinGrowth records over the fit, is linear growth.
	QueueR2        float64
	QueueMinGrowth float64
	DropShare      float64 // backpressure drops ÷ requests received, to warn
	SlowShare      float64 // latency mass at ≥ SlowLatency, to warn
	// P99Warn (seconds) is where the dashboard starts drawing p99 in the
	// warning colour, before it crosses P99.
	P99Warn float64
	// Recent is how far back rates, ratio and latency are averaged.
	Recent time.Duration
	// MinRate is the creation rate below which the ratio means nothing
	// (an idle shard completes what it started long ago).
	MinRate float64
	// StepDown is how recent the evidence that lowers a level is: a
	// condition raises the level on a minute of evidence, and stops
	// raising it as soon as the last StepDown clearly says otherwise.
	StepDown time.Duration
	// QueueEmpty is the queue (records) at or below which nothing is
	// ahead of the work.
	QueueEmpty float64
	// Stale is how long a shard may have no new sample before its level
	// is unknown: its last numbers are not its numbers now.
	Stale time.Duration
}

// DefaultThresholds are the published triggers, with durations that make
// the advisor critical within a minute of the knee and quiet at 70% load.
func DefaultThresholds() Thresholds {
	return Thresholds{
		PlanRatio: 0.8, ActRatio: 0.5, PlanAfter: time.Minute, ActAfter: 30 * time.Second,
		P99: 1, QueueR2: 0.8, QueueMinGrowth: 500, DropShare: 0.05, SlowShare: 0.1,
		P99Warn: 0.1, Recent: time.Minute, MinRate: 0.5, StepDown: 15 * time.Second, QueueEmpty: 100, Stale: 15 * time.Second,
	}
}

// SlowLatency (seconds) is where the heatmap's slow mass starts: the
// share at or above it is shareAtLeast1s.
const SlowLatency = 1.0

// Critical says, in words, when the advisor calls a shard critical.
func (th Thresholds) Critical() string {
	return fmt.Sprintf("completion stays under %s of creation for %s, p99 is over %s, or the queue grows "+
		"linearly (a least-squares fit with R² ≥ %.2g that adds %s records or more)",
		human.Percent(th.ActRatio), human.Duration(th.ActAfter), human.Latency(th.P99), th.QueueR2, human.Count(th.QueueMinGrowth))
}

// Warn says, in words, when the advisor warns.
func (th Thresholds) Warn() string {
	return fmt.Sprintf("completion stays under %s of creation for %s, %s of latency is at %s or more, or %s of requests are refused",
		human.Percent(th.PlanRatio), human.Duration(th.PlanAfter), human.Percent(th.SlowShare), human.Latency(SlowLatency), human.Percent(th.DropShare))
}

// Levels is the advisor's rule in one sentence, as help and docs quote it.
func (th Thresholds) Levels() string {
	return "Levels: critical (act) when " + th.Critical() + "; warn (plan federation) when " + th.Warn() + ". " + th.Hysteresis()
}

// Hysteresis says, in words, how a level steps down.
func (th Thresholds) Hysteresis() string {
	return fmt.Sprintf("A level steps down as soon as the last %s clearly contradicts what raised it: completion at %s of "+
		"creation or more (or no creation), p99 under half its line, the slow share and refusals under half theirs; "+
		"the queue counts as growing only while its last %s still rises. A shard still paying a debt (more instances "+
		"owed than it creates in %s) that takes %s or more is at warn at least until it has caught up.",
		human.Duration(th.StepDown), human.Percent(th.PlanRatio), human.Duration(th.Recent), human.Duration(th.StepDown), human.Duration(latest))
}

// Signals are the numbers of one shard (or the whole) and its level.
type Signals struct {
	Name             string   `json:"name"`
	CreatedPerSec    float64  `json:"createdPerSec"`
	CompletedPerSec  float64  `json:"completedPerSec"`
	Ratio            *float64 `json:"ratio"`            // completed ÷ created; null when idle
	BelowPlanSeconds float64  `json:"belowPlanSeconds"` // how long the ratio has been below PlanRatio
	BelowActSeconds  float64  `json:"belowActSeconds"`  // … below ActRatio
	Queue            float64  `json:"queue"`            // records not processed, latest
	QueueSlope       float64  `json:"queueSlopePerSec"` // least squares: the growth found, else the last minute's
	QueueR2          float64  `json:"queueR2"`          // the fit's R²
	QueueGrowing     bool     `json:"queueGrowingLinearly"`
	P50              *float64 `json:"p50Seconds"`
	P99              *float64 `json:"p99Seconds"`
	SlowShare        float64  `json:"shareAtLeast1s"`
	DropShare        float64  `json:"dropShare"`
	// WriteRateShare is the share of those refusals that met the
	// write-rate limit (flow control, 8.6+); absent where the shard
	// exports no flow control or refused nothing.
	WriteRateShare *float64 `json:"writeRateShare,omitempty"`
	QueueFalling   bool     `json:"queueFalling"` // it falls since the last minute's peak
	// Debt is what the window added to the backlog: created − completed,
	// integrated (instances). RecoverySeconds is when the shard will have
	// caught up (Recovery says how that is reckoned), null when it is not
	// recovering.
	Debt            float64   `json:"debtInstances"`
	Recovering      bool      `json:"recovering"`
	RecoverySeconds *float64  `json:"recoverySeconds"`
	Recovery        *Recovery `json:"recovery"`
	Level           Level     `json:"level"`
	Reasons         []string  `json:"reasons"`
	// LastSeen is the time of the shard's latest sample (null when it
	// has none in the window).
	LastSeen *time.Time `json:"lastSeen"`
	// MetricNames is which of Zeebe's metric names were read ("8.5" or
	// "8.6+"), omitted when the source cannot tell.
	MetricNames string `json:"metricNames,omitempty"`
	// Admission is how the proxies admit new instances to the shard when
	// they pace or refuse it (Snapshot.NoteAdmission), omitted when
	// every proxy admits it or none was asked.
	Admission *Admission `json:"admission,omitempty"`
}

// Report is one evaluation: every shard and the whole federation.
type Report struct {
	At      time.Time `json:"at"`
	Window  Duration  `json:"window"`
	Level   Level     `json:"level"`
	Overall Signals   `json:"overall"`
	Shards  []Signals `json:"shards"`
	// Unknown names the shards whose level is unknown: no sample for
	// longer than the thresholds allow. Level is the worst of the others.
	Unknown []string `json:"unknown"`
}

// Duration reads and writes as Go's duration text.
type Duration time.Duration

// MarshalJSON writes "10m0s".
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads "5m" (or a number of seconds).
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		var secs float64
		if json.Unmarshal(b, &secs) != nil {
			return fmt.Errorf("duration %s: want e.g. \"30s\" or \"5m\"", b)
		}
		*d = Duration(time.Duration(secs * float64(time.Second)))
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("duration %q: want e.g. \"30s\" or \"5m\"", s)
	}
	*d = Duration(v)
	return nil
}

// Evaluate reads every shard and the whole at time now over window. It
// sorts shards by name, in place.
func Evaluate(shards []Shard, now time.Time, window time.Duration, th Thresholds) Report {
	r := Report{At: now, Window: Duration(window), Shards: []Signals{}, Unknown: []string{}}
	sort.Slice(shards, func(i, j int) bool { return shards[i].Name < shards[j].Name })
	var created, completed, queue, dropped, received, throttled []Series
	var heat []Heatmap
	for _, s := range shards {
		if sig, stale := staleSignals(s, now, th); stale {
			// Not in the whole either: what it last said is not now.
			r.Shards = append(r.Shards, sig)
			r.Unknown = append(r.Unknown, s.Name)
			continue
		}
		sig := evaluate(s, now, th)
		r.Shards = append(r.Shards, sig)
		r.Level = max(r.Level, sig.Level)
		created, completed, queue = append(created, s.Created), append(completed, s.Completed), append(queue, s.Queue)
		dropped, received, throttled = append(dropped, s.Dropped), append(received, s.Received), append(throttled, s.Throttled)
		heat = append(heat, s.Latency)
	}
	all := Shard{Name: "all", Created: SumSeries(created...), Completed: SumSeries(completed...), Queue: SumSeries(queue...),
		Dropped: SumSeries(dropped...), Received: SumSeries(received...), Throttled: SumSeries(throttled...), Latency: Merge(heat...)}
	r.Overall = evaluate(all, now, th)
	r.Level = max(r.Level, r.Overall.Level)
	return r
}

func ptr(v float64) *float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return &v
}

func evaluate(s Shard, now time.Time, th Thresholds) Signals {
	recent, short := now.Add(-th.Recent), now.Add(-th.StepDown)
	sig := Signals{Name: s.Name, Reasons: []string{}, LastSeen: s.lastSeen(), MetricNames: s.MetricNames}
	created, completed := s.Created.Since(recent).Mean(), s.Completed.Since(recent).Mean()
	sig.CreatedPerSec, sig.CompletedPerSec = zeroNaN(created), zeroNaN(completed)
	// What the last StepDown says, to step a level down on.
	createdNow, completedNow := zeroNaN(s.Created.Since(short).Mean()), zeroNaN(s.Completed.Since(short).Mean())
	closed := createdNow < th.MinRate || completedNow >= th.PlanRatio*createdNow

	// Scissors: the ratio now, and how long it has stayed below each line.
	if created >= th.MinRate && !math.IsNaN(completed) {
		sig.Ratio = ptr(completed / created)
	}
	sig.BelowPlanSeconds = belowFor(s.Created, s.Completed, th.PlanRatio, th.MinRate, now).Seconds()
	sig.BelowActSeconds = belowFor(s.Created, s.Completed, th.ActRatio, th.MinRate, now).Seconds()

	// Queue: its latest size, whether it grows as a line, and which way
	// its last minute goes.
	sig.Queue = zeroNaN(s.Queue.Last())
	trend := queueTrend(s.Queue, now, th)
	sig.QueueSlope, sig.QueueR2, sig.QueueGrowing, sig.QueueFalling = trend.fit.Slope, trend.fit.R2, trend.growing, trend.emptying != nil

	// Heatmap: where the latency mass is.
	counts, countsNow := s.Latency.Total(recent), s.Latency.Total(short)
	sig.P50 = ptr(Quantile(0.5, s.Latency.Bounds, counts))
	sig.P99 = ptr(Quantile(0.99, s.Latency.Bounds, counts))
	sig.SlowShare = ShareAtLeast(SlowLatency, s.Latency.Bounds, counts)
	p99Now := Quantile(0.99, s.Latency.Bounds, countsNow) // NaN: nothing processed lately, no evidence

	dropped, received := s.Dropped.Since(recent).Mean(), s.Received.Since(recent).Mean()
	if received > 0 && !math.IsNaN(dropped) {
		sig.DropShare = dropped / received
	}
	if throttled := s.Throttled.Since(recent).Mean(); dropped > 0 && !math.IsNaN(throttled) {
		sig.WriteRateShare = ptr(min(1, throttled/dropped))
	}
	droppedNow, receivedNow := s.Dropped.Since(short).Mean(), s.Received.Since(short).Mean()

	// Debt: what the window added to the backlog, and when it is paid.
	sig.Debt = max(0, integrate(s.Created)-integrate(s.Completed))
	// The debt is paid against what is created and completed from now
	// on: the last few seconds say it better than the last StepDown,
	// which may still hold the load that stopped, or miss the burst of
	// completions that begins once the queue is empty. A load is offered
	// at a rate that steps: its last samples say it (their median, not
	// the mean of a load that stopped a second ago).
	createdLatest, completedLatest := rateNow(s.Created), zeroNaN(s.Completed.Since(now.Add(-latest)).Mean())
	if rec := recoveryOf(s, now, trend.emptying, sig.Debt, createdLatest, completedLatest, th); rec != nil {
		sig.Recovering, sig.Recovery, sig.RecoverySeconds = true, rec, ptr(rec.Seconds)
	}

	reason := func(l Level, format string, a ...any) {
		sig.Level = max(sig.Level, l)
		sig.Reasons = append(sig.Reasons, fmt.Sprintf(format, a...))
	}
	pct := human.Percent
	switch {
	case closed:
	case sig.Ratio != nil && *sig.Ratio < th.ActRatio && sig.BelowActSeconds >= th.ActAfter.Seconds():
		reason(Critical, "scissors: completing %s of created instances for %s (below %s): act", pct(*sig.Ratio), human.Seconds(sig.BelowActSeconds), pct(th.ActRatio))
	case sig.Ratio != nil && *sig.Ratio < th.PlanRatio && sig.BelowPlanSeconds >= th.PlanAfter.Seconds():
		reason(Warn, "scissors: completing %s of created instances for %s (below %s): plan federation", pct(*sig.Ratio), human.Seconds(sig.BelowPlanSeconds), pct(th.PlanRatio))
	}
	if sig.QueueGrowing {
		reason(Critical, "queue growing linearly: %+.0f records/s (R² %.2f), %.0f waiting", sig.QueueSlope, sig.QueueR2, sig.Queue)
	}
	switch {
	case sig.P99 != nil && *sig.P99 > th.P99 && !(p99Now < th.P99/2):
		reason(Critical, "latency p99 %s, over %s", human.Latency(*sig.P99), human.Latency(th.P99))
	case sig.SlowShare >= th.SlowShare && !(ShareAtLeast(SlowLatency, s.Latency.Bounds, countsNow) < th.SlowShare/2):
		reason(Warn, "heatmap: %s of latency at %s or more", pct(sig.SlowShare), human.Latency(SlowLatency))
	}
	if sig.DropShare >= th.DropShare && !(receivedNow > 0 && droppedNow/receivedNow < th.DropShare/2) {
		if w := sig.WriteRateShare; w != nil && *w >= 0.5 {
			reason(Warn, "backpressure: %s of requests refused, %s of them at the write-rate limit (flow control: exporting behind or a write rate set)", pct(sig.DropShare), pct(*w))
		} else {
			reason(Warn, "backpressure: %s of requests refused", pct(sig.DropShare))
		}
	}
	if e := trend.emptying; e != nil && sig.Queue > th.QueueEmpty {
		reason(sig.Level, "queue falling: %+.0f records/s, empty in %s", -e.PerSec, When(*e, th))
	}
	// A shard still paying a debt is not ok, whatever else has calmed
	// down: its instances are late until it has caught up. Fewer
	// instances owed than the last StepDown creates are the work a shard
	// under load has in flight, not a debt; one paid within latest is as
	// good as paid; and without completions (the proxy preset) there is
	// no debt to speak of.
	owing := len(s.Completed) > 0 && sig.Debt >= max(1, createdLatest*th.StepDown.Seconds()) &&
		sig.Recovery != nil && sig.Recovery.Seconds >= latest.Seconds()
	if sig.Level > OK && sig.Debt >= 1 || sig.Recovering && sig.Queue > th.QueueEmpty || owing {
		level := sig.Level
		if owing {
			level = max(level, Warn)
		}
		if rec := sig.Recovery; rec != nil {
			reason(level, "debt %s instances, caught up in %s (%s)", human.Count(sig.Debt), rec.When(), rec.Terms())
		} else {
			reason(level, "debt %s instances and not recovering", human.Count(sig.Debt))
		}
	}
	return sig
}

// latest is how far back "now" reaches for a rate that just changed.
const latest = 5 * time.Second

// rateNow is the median of a series' last three samples (0 when empty):
// the level a rate that steps has now.
func rateNow(s Series) float64 {
	v := s[max(0, len(s)-3):].Values()
	sort.Float64s(v)
	if len(v) == 0 {
		return 0
	}
	return v[len(v)/2]
}

// trend is the queue's shape: the fit reported, whether it grows, and
// how it empties when it falls.
type trend struct {
	fit     Fit
	growing bool
	// emptying is how the queue empties when it falls (nil when not):
	// the reason, the flag and the ETA all read this one fit.
	emptying *Emptying
}

// QueueTrend fits lines to the queue over the recent minute, two, five
// and the whole window: a knee crossed mid-window grows as a line only
// since then, and a fit over the whole window would dilute it. The queue
// grows linearly when any of those fits rises with a good R² by enough
// records, and the last minute still rises at half that pace or more and
// has not turned to fall (a queue that has turned is not growing,
// whatever a longer fit says), and its latest samples have not left the
// line (offLine); the shortest such fit is reported, the rate it grows
// at now (else the last minute's, else the whole window's).
func QueueTrend(q Series, now time.Time, th Thresholds) (slope, r2 float64, growing bool) {
	t := queueTrend(q, now, th)
	return t.fit.Slope, t.fit.R2, t.growing
}

func queueTrend(q Series, now time.Time, th Thresholds) trend {
	t := trend{fit: LinearFit(q)}
	if len(q) < 3 {
		return t
	}
	last := q.Since(now.Add(-th.Recent))
	if len(last) >= 3 {
		t.fit = LinearFit(last)
	}
	// Falling is read as the ETA is, from where the last minute's fall
	// began: a minute that rose, then fell, has turned.
	if e, ok := EmptyIn(q, now, th.Recent); ok {
		t.emptying = &e
		return t
	}
	for _, back := range []time.Duration{th.Recent, 2 * th.Recent, 5 * th.Recent, 0} {
		part := q
		if back > 0 {
			part = q.Since(now.Add(-back))
		}
		if len(part) < 3 {
			continue
		}
		f := LinearFit(part)
		growth := f.Slope * part[len(part)-1].T.Sub(part[0].T).Seconds()
		if f.Slope > 0 && f.R2 >= th.QueueR2 && growth >= th.QueueMinGrowth {
			if len(last) >= 3 && LinearFit(last).Slope < f.Slope/2 || offLine(part) {
				return t // it has turned: not growing, whatever this fit says
			}
			t.fit, t.growing = f, true
			return t
		}
	}
	return t
}

// offLine says whether the last offLinePoints of s all lie more than
// offLineScatters below the line the points before them grew along (in
// that line's scatter): a queue that has turned, read before the turn
// itself shows as a line (a batch of job completions taken back into a
// falling queue keeps its fall off a line), yet not from a queue that
// grows through noise, whose samples stray that far below its line one
// in forty times each, and seldom three together.
func offLine(s Series) bool {
	if len(s) < 3*offLinePoints {
		return false
	}
	before, latest := s[:len(s)-offLinePoints], s[len(s)-offLinePoints:]
	f := LinearFit(before)
	for _, p := range latest {
		if f.Below(before[0].T, p) <= offLineScatters {
			return false
		}
	}
	return true
}

const (
	offLinePoints   = 3
	offLineScatters = 2
)

// belowFor is how long, back from now, completion has stayed under ratio ×
// creation (ignoring idle steps).
func belowFor(created, completed Series, ratio, minRate float64, now time.Time) time.Duration {
	done := byTime(completed)
	var since time.Time
	for i := len(created) - 1; i >= 0; i-- {
		p := created[i]
		c, ok := done[p.T.UnixNano()]
		if !ok || p.V < minRate {
			continue
		}
		if c >= ratio*p.V {
			break
		}
		since = p.T
	}
	if since.IsZero() {
		return 0
	}
	return now.Sub(since)
}

// integrate sums a per-second series over its steps (trapezoids).
func integrate(s Series) float64 {
	var sum float64
	for i := 1; i < len(s); i++ {
		dt := s[i].T.Sub(s[i-1].T).Seconds()
		sum += (s[i].V + s[i-1].V) / 2 * dt
	}
	return sum
}

func zeroNaN(v float64) float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0
	}
	return v
}

func sortTimes(ts []time.Time) {
	sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) })
}

// Snapshot is one fetch and its evaluation: the series the pictures are
// drawn from and the report the advisor made of them.
type Snapshot struct {
	Report Report
	Series []Shard // by name, as the report's shards
	// States are the shards' states in the registry (UP, DRAINING, …), by
	// name, when a registry was asked.
	States map[string]string
	// Thresholds are those the report was evaluated with, so that what is
	// drawn from it agrees with the report.
	Thresholds Thresholds
	// Federation is what the registry says of pools and a cutover, when a
	// registry was asked.
	Federation *Federation
}

// Federation is the registry's side of the picture: pools, the weights
// new instances are placed by, and a cutover in progress.
type Federation struct {
	Pools   map[string]string // shard → pool
	Weights map[string]int    // pool → percent of new instances; nil: every shard alike
	// Cutover says in one line where a cutover in progress is ("" when
	// none is).
	Cutover string
	// Draining says what each draining shard still holds, as the drain
	// last read it.
	Draining map[string]string
	// Down says, for each shard a proxy holds DOWN, how many of the
	// proxies do and why.
	Down map[string]string
	// Refused says, for each shard a proxy gives no new instances (for
	// its backlog, or its instance limit), how many do and why.
	Refused map[string]string
	// Paced says, for each shard a proxy paces (and none refuses), how
	// many do, the new instances a second they give it and why:
	// "b paced by 2 of 2 proxies to 40 new instances/s: queue 310ms …".
	Paced map[string]string
	// Admission is, by shard, how the proxies admit new instances to it,
	// for the shards that not every proxy simply admits (paced or
	// refused); Proxies is, by shard, how many proxies answered and route
	// to it. A shard in neither no proxy spoke of; one in Proxies only
	// every proxy admits.
	Admission map[string]Admission
	Proxies   map[string]int
	// Refusals are the new instances the proxies refused, from their own
	// metrics (nil before two reads of them).
	Refusals *Refusals
}

// Refusals are the explicit backpressure of a federation: new instances
// its proxies refused their clients, and what each shard refused them.
type Refusals struct {
	// AskedPerSec and PerSec are the new instances clients asked for and
	// those refused with RESOURCE_EXHAUSTED, a second; Share is the part
	// refused.
	AskedPerSec, PerSec, Share float64
	// Shards is, by shard, the part of the new instances sent to it that
	// it refused (its own backpressure, as the proxies saw it).
	Shards map[string]float64
}

// Take evaluates fetched series into a snapshot.
func Take(shards []Shard, now time.Time, window time.Duration, th Thresholds) Snapshot {
	r := Evaluate(shards, now, window, th) // sorts shards as the report's
	return Snapshot{Report: r, Series: shards, Thresholds: th}
}
