package human

import (
	"testing"
	"time"
)

func TestFormats(t *testing.T) {
	tests := []struct {
		name, got, want string
	}{
		{"rate small", Rate(12.46), "12.5"},
		{"rate hundreds", Rate(120.4), "120"},
		{"rate thousands", Rate(1234), "1.2k"},
		{"rate tens of thousands", Rate(12345), "12k"},
		{"count", Count(950), "950"},
		{"count k", Count(1234), "1.2k"},
		{"count tens of k", Count(34_100), "34k"},
		{"count M", Count(3_400_000), "3.4M"},
		{"count negative", Count(-1500), "-1.5k"},
		{"percent", Percent(0.804), "80%"},
		{"latency µs", Latency(0.00035), "350µs"},
		{"latency ms", Latency(0.015), "15ms"},
		{"latency s", Latency(1.54), "1.5s"},
		{"latency whole s", Latency(1), "1s"},
		{"latency tens of s", Latency(42.4), "42.4s"},
		{"latency minutes", Latency(200), "3m20s"},
		{"duration seconds", Duration(45 * time.Second), "45s"},
		{"duration minutes", Duration(90 * time.Second), "1m30s"},
		{"duration whole minutes", Duration(2 * time.Minute), "2m"},
		{"duration hours", Duration(65 * time.Minute), "1h5m"},
		{"duration whole hours", Duration(time.Hour), "1h"},
		{"duration rounds", Duration(1499 * time.Millisecond), "1s"},
		{"seconds", Seconds(30.4), "30s"},
		{"under a second", Seconds(0.3), "<1s"},
		{"zero", Seconds(0), "0s"},
		{"missing", Or(nil, Latency), None},
		{"one", Plural(1, "incident"), "1 incident"},
		{"many", Plural(3, "incident"), "3 incidents"},
		{"none", Plural(0, "job"), "0 jobs"},
		{"weights", Weights(map[string]int{"green": 10, "blue": 90}), "blue 90% / green 10%"},
		{"no weights", Weights(nil), "none"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: got %q, want %q", tt.name, tt.got, tt.want)
		}
	}
}

// Latencies fit the dashboard's six-character column at every magnitude.
func TestLatencyWidth(t *testing.T) {
	for s := 1e-6; s < 3600; s *= 1.37 {
		if got := Latency(s); len([]rune(got)) > 6 {
			t.Errorf("Latency(%v) = %q, wider than 6", s, got)
		}
	}
}
