package route

import "testing"

// The placement path counts what it placed since the reading as in
// flight, a refusal is reported by the next reading, and the limit binds
// only while the shard's log is congested.
func TestInstanceLimitAdmits(t *testing.T) {
	var l instanceLimit
	if !l.admits() {
		t.Fatal("no limit yet: want admitted")
	}
	l.observe(70, 0, 64)
	if !l.admits() {
		t.Fatal("70 of 64 with an empty log: the job workers are behind, not the shard; want admitted")
	}
	if binding, _ := l.observe(60, congestedLag, 64); !binding {
		t.Fatal("a congested log: want the limit binding")
	}
	for range 3 {
		if !l.admits() {
			t.Fatalf("%d in flight under 64: want admitted", l.inFlight.Load()+l.placed.Load())
		}
		l.placed.Add(1)
	}
	if !l.admits() || l.limited.Load() {
		t.Fatal("63 of 64: want admitted, nothing refused")
	}
	l.placed.Add(1)
	if l.admits() || !l.limited.Load() {
		t.Fatal("64 of 64: want refused and marked")
	}
	if _, refused := l.observe(10, congestedLag, 64); !refused || !l.admits() || l.placed.Load() != 0 || l.limited.Load() {
		t.Error("a new reading: want the refusal reported, its count alone, admitted, the mark taken")
	}
	// Congestion holds one reading past a log that emptied.
	l.observe(70, 0, 64)
	if l.admits() {
		t.Error("70 of 64, the log empty now but congested a reading ago: want refused")
	}
	l.observe(70, 0, 64)
	if !l.admits() {
		t.Error("70 of 64, the log empty two readings in a row: want admitted")
	}
	l.observe(70, congestedLag, 0)
	if !l.admits() {
		t.Error("no limit configured: want admitted")
	}
}
