package route

import (
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/backlog"
)

// Admission on a series of readings: over the max, or growing linearly,
// refuses; back under half the max and not growing, admits; a reading
// that fails changes nothing.
func TestAdmissionDecisions(t *testing.T) {
	p, err := New(Config{Dynamic: true, MaxBacklog: 100, Health: HealthConfig{Interval: -1}})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	at := func(sec int) time.Time { return t0.Add(time.Duration(sec) * time.Second) }
	for _, tc := range []struct {
		name     string
		readings []backlog.Backlog
		refusing bool
	}{
		{"low and flat", []backlog.Backlog{{Lag: 10}, {Lag: 12}, {Lag: 9}}, false},
		{"over the max", []backlog.Backlog{{Lag: 10}, {Lag: 150}}, true},
		{"over, then between half and the max", []backlog.Backlog{{Lag: 150}, {Lag: 80}}, true},
		{"over, then under half", []backlog.Backlog{{Lag: 150}, {Lag: 80}, {Lag: 40}}, false},
		{"growing linearly under the max", []backlog.Backlog{{Lag: 0}, {Lag: 15}, {Lag: 30}, {Lag: 45}, {Lag: 60}}, true},
		{"a failed reading changes nothing", []backlog.Backlog{{Lag: 150}, {Error: "connection refused"}}, true},
		{"missing series change nothing", []backlog.Backlog{{Lag: 10}, {Missing: []string{"zeebe_log_appender_last_committed_position"}}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := fakeShard("a", 1, "")
			s.Metrics = "http://127.0.0.1:1/metrics"
			for i, b := range tc.readings {
				b.At = at(i)
				p.admit(s, b)
			}
			if got := s.admission.refusing.Load(); got != tc.refusing {
				t.Errorf("refusing %v, want %v (%+v)", got, tc.refusing, s.backlogStatus())
			}
			if st := s.backlogStatus(); st.Admitting == tc.refusing || st.Max != 100 {
				t.Errorf("status %+v", st)
			}
			if s.takesInstances(at(10), 0) == tc.refusing {
				t.Errorf("takesInstances %v while refusing %v", !tc.refusing, tc.refusing)
			}
		})
	}
}
