package route

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shardctl/shardctl/internal/backlog"
	"github.com/shardctl/shardctl/internal/logs/logstest"
)

// Ejection and its end, the admission decisions, and the lines that
// repeat under load (cooling off, the in-flight limit, overload), on
// shards without connections.
func TestLogsPlacementDecisions(t *testing.T) {
	log, lines := logstest.New()
	p, err := New(Config{Dynamic: true, Logger: log, MaxBacklog: 100, MaxInflightPerShard: 8, OverloadLimit: 4, OverloadExcess: 50,
		Health: HealthConfig{Interval: -1, OutlierFailures: 2, EjectionTime: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	p.cfg.Health.Interval = time.Hour // on, but no loop runs
	a, b := fakeShard("a", 1, ""), fakeShard("b", 2, "")
	a.Metrics = "http://127.0.0.1:1/metrics"
	p.set.Store(build([]*Shard{a, b}, "", nil))
	t.Cleanup(func() {
		p.set.Store(emptySet) // fake shards have no connection to close
		_ = p.Close(context.Background())
	})

	// Ejected after two failures, returned once its time is up.
	unavailable := status.Error(codes.Unavailable, "io exception")
	p.noteFailure(false, a, unavailable)
	p.noteFailure(false, a, unavailable)
	lines.Wait(t, time.Second, "shard ejected from placement", "shard", "a", "slot", 1, "for", "1m0s", "ejections", 1, "level", "WARN")
	p.noteReturned(a, time.Now())
	if n := len(lines.Find(t, "shard returned to placement")); n != 0 {
		t.Fatalf("returned while still ejected")
	}
	p.noteReturned(a, time.Now().Add(2*time.Minute))
	p.noteReturned(a, time.Now().Add(3*time.Minute))
	if n := len(lines.Find(t, "shard returned to placement", "shard", "a")); n != 1 {
		t.Errorf("%d lines of a returning, want 1", n)
	}

	// Admission by backlog: refusing over the max, admitting under half.
	at := time.Now()
	for i, lag := range []float64{10, 150, 80, 40} {
		p.admit(a, backlog.Backlog{At: at.Add(time.Duration(i) * time.Second), Lag: lag})
	}
	lines.Wait(t, time.Second, "shard refusing new instances", "shard", "a", "reason", "backlog", "records", 150, "maxBacklog", 100)
	lines.Wait(t, time.Second, "shard admitting new instances", "shard", "a", "reason", "backlog", "records", 40)
	// By a fixed instance limit: a reading after a refusal, then one
	// after none.
	p.cfg.InstanceLimit = 64
	a.admission.instances.limited.Store(true)
	p.admit(a, backlog.Backlog{At: at.Add(5 * time.Second), Lag: 20, InFlight: 70})
	p.admit(a, backlog.Backlog{At: at.Add(6 * time.Second), Lag: 20, InFlight: 30})
	lines.Wait(t, time.Second, "shard refusing new instances", "shard", "a", "reason", "instance limit", "instances", 70, "instanceLimit", 64)
	lines.Wait(t, time.Second, "shard admitting new instances", "shard", "a", "reason", "instance limit", "instances", 30)
	if n := len(lines.Find(t, "shard refusing new instances", "shard", "a")); n != 2 {
		t.Errorf("%d refusing lines, want one per decision (2)", n)
	}
	// Paced by its queue: 400 records standing at 200 a second is 2 s
	// over a 250 ms target; then three calm readings end it.
	p.cfg.InstanceLimit = InstanceLimitAuto
	var pos, created float64
	for i, lag := range []float64{0, 400, 400, 0, 0, 0, 0} {
		pos, created = pos+200, created+40
		p.admit(a, backlog.Backlog{At: at.Add(time.Duration(10+i) * time.Second), Lag: lag, Committed: pos + lag, Processed: pos, Created: created})
	}
	lines.Wait(t, time.Second, "shard paced", "shard", "a", "reason", "queue", "queueDelaySeconds", 2, "queueTarget", "250ms", "capacity", 200)
	lines.Wait(t, time.Second, "shard no longer paced", "shard", "a", "reason", "queue", "queueDelaySeconds", 0)

	// A hundred RESOURCE_EXHAUSTED answers: one line, then a count.
	exhausted := status.Error(codes.ResourceExhausted, "partition 1 backpressure")
	for range 100 {
		p.CoolOff(b, exhausted)
	}
	// The in-flight limit refuses the 9th call and those after; the 7th
	// overloads the shard, and it is back under 4.
	for i := range 10 {
		if err := p.Enter(b, "CreateProcessInstance"); err != nil && i < 8 {
			t.Fatalf("call %d refused: %v", i+1, err)
		}
	}
	for range 8 {
		p.Leave(b, "CreateProcessInstance", nil, false)
	}
	if got := lines.Find(t, "shard cooling off, refusing new instances", "shard", "b"); len(got) != 1 ||
		got[0]["reason"] != "partition 1 backpressure" || got[0]["for"] != "30s" {
		t.Errorf("cooling off lines %v, want one, with the reason and the time", got)
	}
	lines.Wait(t, time.Second, "shard overloaded, refusing new instances", "shard", "b", "inFlight", 7, "overloadAt", 6)
	lines.Wait(t, time.Second, "shard refusing calls at its in-flight limit", "shard", "b", "limit", 8)
	// What was left out is counted when the proxy stops (or an interval
	// later): the latest overload line is the state it is in.
	p.repeats.FlushAll()
	lines.Wait(t, time.Second, "shard cooling off, refusing new instances", "shard", "b", "suppressed", 99)
	lines.Wait(t, time.Second, "shard refusing calls at its in-flight limit", "shard", "b", "suppressed", 1)
	lines.Wait(t, time.Second, "shard no longer overloaded, admitting new instances", "shard", "b", "suppressed", 1, "inFlight", 3)
}
