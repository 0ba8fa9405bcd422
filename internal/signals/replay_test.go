package signals_test

import (
	"strings"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/signals"
	"github.com/shardctl/shardctl/internal/signals/signalstest"
)

// replay evaluates a recorded run every 5 s from 30 s in, as `signals
// --watch --every 5s --window 10m` does.
func replay(t *testing.T, file string) (signalstest.Recording, []signalstest.Eval) {
	t.Helper()
	r, err := signalstest.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	const window, every = 10 * time.Minute, 5 * time.Second
	var evals []signalstest.Eval
	for at := r.Start.Add(30 * time.Second); !at.After(r.At("end")); at = at.Add(every) {
		rep := signals.Evaluate([]signals.Shard{r.Until(at, window)}, at, window, signals.DefaultThresholds())
		evals = append(evals, signalstest.Eval{At: at, Sig: rep.Shards[0]})
	}
	return r, evals
}

// TestRecordedWayDown replays recorded runs of a degraded simulator
// (internal/source TestAdvisorOnTheWayDown, in the long tier: run with
// -tags long and SHARDCTL_RECORD_RECOVERY set): overloaded, its load
// stopped, overloaded again, its load lowered to a third of its knee.
// The ETAs, reasons and levels are judged against the recoveries
// measured in that run.
//
// The bar is an ETA within 20% of the recovery's length (or 10 s) at
// every evaluation. Both runs meet it; the second only just (20%, and
// 21% at its first ETA, 6 s after the load stopped, 9 s off), where the
// shard paid its first debt at a pace well over any it had shown before.
func TestRecordedWayDown(t *testing.T) {
	for _, file := range []string{"testdata/recovery.json", "testdata/recovery-2.json"} {
		t.Run(file, func(t *testing.T) {
			r, evals := replay(t, file)
			v := signalstest.Judge(r, evals, signals.DefaultThresholds(), signalstest.ETAError)
			t.Logf("every 5s, against the recovery measured:\n%s", strings.Join(v.Lines, "\n"))
			for _, f := range v.Failures {
				t.Error(f)
			}
			if len(v.Errors) < 8 {
				t.Errorf("%d ETAs judged, want a recovery's worth of each", len(v.Errors))
			}
		})
	}
}

// TestRecordedFromThePeak replays those runs and four of a burst from
// idle (internal/source TestAdvisorAfterABurst, in the long tier too: the
// capacity probe's three-task process at 110 instances a second for 30 s,
// then nothing; burst.json ran without the race detector, the others
// with it, whose workers pay the debt at 65-70 instances a second where
// burst.json's paid it at 80; burst-4.json's queue took back four batches
// of job completions on its way down, and emptied 45 s after its peak)
// and judges them as an operator reads them once the queue has turned:
// from the first evaluation after its peak, 80% of the ETAs within 20%
// (or 10 s) of the time left, no "growing" once it falls, no ok while
// the debt is paid.
func TestRecordedFromThePeak(t *testing.T) {
	for _, file := range []string{"testdata/recovery.json", "testdata/recovery-2.json",
		"testdata/burst.json", "testdata/burst-2.json", "testdata/burst-3.json", "testdata/burst-4.json"} {
		t.Run(file, func(t *testing.T) {
			r, evals := replay(t, file)
			v := signalstest.JudgeFromPeak(r, evals, signals.DefaultThresholds(), signalstest.ETAError)
			t.Logf("every 5s, %d of %d ETAs after the peak within the bar:\n%s", v.Within, v.Judged, strings.Join(v.Lines, "\n"))
			for _, f := range v.Failures {
				t.Error(f)
			}
		})
	}
}
