package signals

import (
	"fmt"
	"slices"

	"github.com/shardctl/shardctl/internal/human"
)

// A shard's admission by the proxies, as they name it (the values of
// proxyapi's BacklogStatus.State, which the model does not import).
const (
	AdmissionOpen    = "admitting" // takes what it is offered
	AdmissionPaced   = "pacing"    // new instances up to a rate
	AdmissionRefused = "refusing"  // no new instance
)

// Admission is how the proxies admit new instances to one shard that
// they do not all simply admit.
type Admission struct {
	// State is the most restrictive of the proxies' admissions:
	// AdmissionRefused when one refuses the shard, else AdmissionPaced.
	State string `json:"state"`
	// Reason says why, as the first proxy (by id) in that state says it.
	Reason string `json:"reason"`
	// Proxies of the Of proxies that answered and route to the shard are
	// in that state.
	Proxies int `json:"proxies"`
	Of      int `json:"of"`
	// RatePerSec is the new instances a second the pacing proxies give
	// the shard between them; 0 when refused, or when a pacing proxy has
	// no rate yet.
	RatePerSec float64 `json:"ratePerSec"`
}

// Line says it in one line, named by shard: "b refused new instances by
// 1 of 2 proxies: backlog 1.2k records (max 1.0k)", "b paced by 2 of 2
// proxies to 40 new instances/s: queue 310ms over the 250ms target: …".
func (a Admission) Line(shard string) string {
	if a.State == AdmissionRefused {
		return fmt.Sprintf("%s refused new instances by %d of %d proxies: %s", shard, a.Proxies, a.Of, a.Reason)
	}
	to := ""
	if a.RatePerSec > 0 {
		to = " to " + AdmitRate(a.RatePerSec) + " new instances/s"
	}
	return fmt.Sprintf("%s paced by %d of %d proxies%s: %s", shard, a.Proxies, a.Of, to, a.Reason)
}

// AdmitRate writes a rate of new instances a second as the proxies'
// reasons do, whole from 10 up: 2.5, 40, 120, 1.2k.
func AdmitRate(v float64) string {
	switch {
	case v >= 1e3:
		return human.Count(v)
	case v >= 9.95:
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}

// NoteAdmission says, in the report, how the proxies admit each shard
// they pace or refuse: its Admission, and its line among its reasons,
// after the DOWN line of HoldDown when there is one and before the
// level's own (the proxies' view first, as HoldDown has it).
func (s *Snapshot) NoteAdmission() {
	f := s.Federation
	if f == nil || len(f.Admission) == 0 {
		return
	}
	for i := range s.Report.Shards {
		sig := &s.Report.Shards[i]
		a, ok := f.Admission[sig.Name]
		if !ok {
			continue
		}
		sig.Admission = &a
		at := 0
		if down := f.Down[sig.Name]; down != "" && len(sig.Reasons) > 0 && sig.Reasons[0] == down {
			at = 1
		}
		sig.Reasons = slices.Insert(slices.Clone(sig.Reasons), at, a.Line(sig.Name))
	}
}
