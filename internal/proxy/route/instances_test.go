package route

import (
	"testing"
	"time"
)

// phase is a stretch of one-second readings at a steady completion rate
// with a steady count in flight; limited says whether the limit refused
// placements during it.
type phase struct {
	secs     int
	rate     float64
	inFlight float64
	limited  bool
}

func TestInstanceLimit(t *testing.T) {
	tests := []struct {
		name       string
		phases     []phase
		restart    bool // the completion counter restarts before the last reading
		partitions int
		configured int64
		want       int64
	}{
		{name: "no completion yet: the floor", phases: []phase{{secs: 10, inFlight: 30}}, partitions: 1, want: minInstances},
		{name: "the floor is per partition", phases: []phase{{secs: 10, rate: 10, inFlight: 5}}, partitions: 3, want: 3 * minInstances},
		// 2 × 100/s × (0.5 s in flight + 1 s interval)
		{name: "learned: twice rate times time in flight plus the interval", phases: []phase{{secs: 20, rate: 100, inFlight: 50}}, partitions: 1, want: 300},
		{name: "fixed", phases: []phase{{secs: 20, rate: 100, inFlight: 50}}, partitions: 1, configured: 40, want: 40},
		{name: "off", phases: []phase{{secs: 20, rate: 100, inFlight: 50}}, partitions: 1, configured: InstanceLimitOff, want: 0},
		// At the limit the queue inside the shard lengthens the time in
		// flight (400 ÷ 100 = 4 s): learning it would raise the limit
		// with its own queue. The time learned before is kept after its
		// readings are gone.
		{name: "time in flight is not learned while the limit refuses", phases: []phase{{secs: 20, rate: 100, inFlight: 50}, {secs: 400, rate: 100, inFlight: 400, limited: true}},
			partitions: 1, want: 300},
		// 2 × 100/s × (1 s + 1 s)
		{name: "time in flight is learned again once nothing is refused", phases: []phase{{secs: 20, rate: 100, inFlight: 50}, {secs: 400, rate: 100, inFlight: 400, limited: true}, {secs: 10, rate: 100, inFlight: 100}},
			partitions: 1, want: 400},
		// The best rate of the last minute (100/s), the shortest time of
		// the last five (0.5 s at 200/s).
		{name: "rate from the last minute, time from the last five", phases: []phase{{secs: 10, rate: 200, inFlight: 100}, {secs: 70, rate: 100, inFlight: 100}},
			partitions: 1, want: 300},
		{name: "a restarted counter starts over", phases: []phase{{secs: 20, rate: 100, inFlight: 50}}, restart: true, partitions: 1, want: minInstances},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var l instanceLimit
			at, ended := time.Unix(1_000_000, 0), 0.0
			var st instanceStatus
			for _, ph := range tt.phases {
				for range ph.secs {
					at, ended = at.Add(time.Second), ended+ph.rate
					l.limited.Store(ph.limited)
					st = l.observe(instanceReading{at: at, inFlight: ph.inFlight, ended: ended}, tt.partitions, time.Second, tt.configured)
				}
			}
			if tt.restart {
				st = l.observe(instanceReading{at: at.Add(time.Second), inFlight: 3, ended: 5}, tt.partitions, time.Second, tt.configured)
			}
			if st.limit != tt.want || l.limit.Load() != tt.want {
				t.Errorf("limit %d (stored %d), want %d (rate %.1f/s, %v in flight)", st.limit, l.limit.Load(), tt.want, st.rate, st.inFlightTime)
			}
		})
	}
}

// The placement path counts what it placed since the reading as in
// flight, and a refusal marks the span as limited.
func TestInstanceLimitAdmits(t *testing.T) {
	var l instanceLimit
	if !l.admits() {
		t.Fatal("no limit yet: want admitted")
	}
	l.observe(instanceReading{at: time.Unix(1, 0), inFlight: 70}, 1, time.Second, InstanceLimitAuto)
	if !l.admits() {
		t.Fatal("70 of 64 with an empty log: the job workers are behind, not the shard; want admitted")
	}
	l.observe(instanceReading{at: time.Unix(2, 0), inFlight: 60, lag: congestedLag}, 1, time.Second, InstanceLimitAuto)
	for range 3 {
		if !l.admits() {
			t.Fatalf("%d in flight under the floor %d: want admitted", l.inFlight.Load()+l.placed.Load(), minInstances)
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
	l.observe(instanceReading{at: time.Unix(3, 0), inFlight: 10, lag: congestedLag}, 1, time.Second, InstanceLimitAuto)
	if !l.admits() || l.placed.Load() != 0 || l.limited.Load() {
		t.Error("a new reading: want its count alone, admitted, the mark taken by the reading")
	}
	// Congestion holds one reading past a log that emptied.
	l.observe(instanceReading{at: time.Unix(4, 0), inFlight: 70, lag: 0}, 1, time.Second, InstanceLimitAuto)
	if l.admits() {
		t.Error("70 of 64, the log empty now but congested a reading ago: want refused")
	}
	l.observe(instanceReading{at: time.Unix(5, 0), inFlight: 70, lag: 0}, 1, time.Second, InstanceLimitAuto)
	if !l.admits() {
		t.Error("70 of 64, the log empty two readings in a row: want admitted")
	}
}
