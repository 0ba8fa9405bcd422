package signals

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/shardctl/shardctl/internal/human"
)

// lastSeen is the time of the shard's latest sample in any series, nil
// when it has none.
func (s Shard) lastSeen() *time.Time {
	var last time.Time
	for _, ser := range []Series{s.Created, s.Completed, s.Queue, s.Dropped, s.Received} {
		if len(ser) > 0 && ser[len(ser)-1].T.After(last) {
			last = ser[len(ser)-1].T
		}
	}
	if n := len(s.Latency.Times); n > 0 && s.Latency.Times[n-1].After(last) {
		last = s.Latency.Times[n-1]
	}
	if last.IsZero() {
		return nil
	}
	return &last
}

// ForStep are the thresholds for series of a step: a shard is stale
// once it missed three of its points, if that is longer than Stale.
func (th Thresholds) ForStep(step time.Duration) Thresholds {
	th.Stale = max(th.Stale, 3*step)
	return th
}

// staleSignals are a shard's signals when its metrics stopped (stale is
// true then): its level unknown, no numbers (the last it had are not its
// numbers now), and why in words.
func staleSignals(s Shard, now time.Time, th Thresholds) (Signals, bool) {
	seen := s.lastSeen()
	stale := th.Stale
	if stale <= 0 {
		stale = DefaultThresholds().Stale
	}
	if seen != nil && now.Sub(*seen) <= stale {
		return Signals{}, false
	}
	why := "no metrics in the window"
	if seen != nil {
		why = fmt.Sprintf("no metrics for %s (since %s)", human.Seconds(now.Sub(*seen).Seconds()), seen.Local().Format(time.TimeOnly))
	}
	if s.Missing != "" {
		why += ": " + s.Missing
	}
	return Signals{Name: s.Name, Level: Unknown, LastSeen: seen, Reasons: []string{why}}, true
}

// HoldDown makes the snapshot say DOWN wherever a proxy holds a shard
// DOWN: its state is DOWN whatever the registry says, the reason comes
// first, and a shard with no signals (the registry dropped it, its
// metrics are gone) is listed with its level unknown rather than left out.
func (s *Snapshot) HoldDown() {
	f := s.Federation
	if f == nil || len(f.Down) == 0 {
		return
	}
	if s.States == nil {
		s.States = map[string]string{}
	}
	for _, id := range slices.Sorted(maps.Keys(f.Down)) {
		s.States[id] = "DOWN"
		i := slices.IndexFunc(s.Report.Shards, func(sig Signals) bool { return sig.Name == id })
		if i < 0 {
			s.Report.Shards = append(s.Report.Shards, Signals{Name: id, Level: Unknown, Reasons: []string{f.Down[id]}})
			s.Report.Unknown = append(s.Report.Unknown, id)
			s.Series = append(s.Series, Shard{Name: id})
			continue
		}
		sig := &s.Report.Shards[i]
		sig.Reasons = append([]string{f.Down[id]}, sig.Reasons...)
	}
	slices.SortFunc(s.Report.Shards, func(a, b Signals) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(s.Series, func(a, b Shard) int { return strings.Compare(a.Name, b.Name) })
}

// CountRefusals adds the proxies' refusals to the federation's signals:
// new instances refused at its front are backpressure its clients met,
// which no shard counts (a shard the proxy gives nothing refuses
// nothing). Past the thresholds' drop share the whole warns, as a shard
// whose own backpressure refuses as much does.
func (s *Snapshot) CountRefusals() {
	f := s.Federation
	if f == nil || f.Refusals == nil || f.Refusals.Share <= s.Report.Overall.DropShare {
		return
	}
	all := &s.Report.Overall
	all.DropShare = f.Refusals.Share
	if all.DropShare >= s.Thresholds.DropShare {
		all.Level = max(all.Level, Warn)
		all.Reasons = append(all.Reasons, fmt.Sprintf("backpressure: the proxies refused %s of new instances", human.Percent(all.DropShare)))
		s.Report.Level = max(s.Report.Level, all.Level)
	}
}
