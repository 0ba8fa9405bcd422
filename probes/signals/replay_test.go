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
// The bar is an ETA within 20% of the recovery's length (or 10 s) at
// every evaluation. Both runs meet it; the second only just (20%, and
// 21% at its first ETA, 6 s after the load stopped, 9 s off), where the
// shard paid its first debt at a pace well over any it had shown before.
func TestRecordedWayDown(t *testing.T) {
	for _, file := range []string{"testdata/recovery.json", "testdata/recovery-2.json"} {
		t.Run(file, func(t *testing.T) {
			r, err := signalstest.Load(file)
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
			v := signalstest.Judge(r, evals, th, signalstest.ETAError)
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
