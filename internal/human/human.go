// Package human writes numbers for people: rates, counts, shares,
// latencies and durations, the same way in tables, on the dashboard and in
// the advisor's reasons. JSON output never goes through it.
// It is part of the model every room shares, so it imports nothing of this
// module.
package human

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"
)

// None is what a missing value prints as.
const None = "-"

// Rate is a per-second figure in at most five characters: 12k, 1.2k,
// 120, 12.5.
func Rate(v float64) string {
	switch a := math.Abs(v); {
	case a >= 1e4:
		return fmt.Sprintf("%.0fk", v/1e3)
	case a >= 1e3:
		return fmt.Sprintf("%.1fk", v/1e3)
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}

// Count is a whole number of things: 950, 1.2k, 34k, 3.4M.
func Count(v float64) string {
	switch a := math.Abs(v); {
	case a >= 1e6:
		return fmt.Sprintf("%.1fM", v/1e6)
	case a >= 1e4:
		return fmt.Sprintf("%.0fk", v/1e3)
	case a >= 1e3:
		return fmt.Sprintf("%.1fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}

// Percent is a ratio as a whole percentage: 0.804 is 80%.
func Percent(ratio float64) string { return fmt.Sprintf("%.0f%%", ratio*100) }

// Latency is a time in seconds in at most six characters: 350µs, 15ms,
// 1s, 1.5s, 42.4s, 3m20s.
func Latency(seconds float64) string {
	d := time.Duration(seconds * float64(time.Second))
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%dµs", d.Microseconds())
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return strings.TrimSuffix(fmt.Sprintf("%.1f", d.Seconds()), ".0") + "s"
	}
	return Duration(d)
}

// Duration is a span to the second, without a trailing zero unit: 45s,
// 1m30s, 2m, 1h5m; a span under half a second is <1s, not 0s.
func Duration(d time.Duration) string {
	if d > 0 && d < time.Second/2 {
		return "<1s"
	}
	s := d.Round(time.Second).String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// Seconds is Duration of a number of seconds.
func Seconds(s float64) string { return Duration(time.Duration(s * float64(time.Second))) }

// Or writes v with format, or None when v is missing.
func Or(v *float64, format func(float64) string) string {
	if v == nil {
		return None
	}
	return format(*v)
}

// Plural is a count and its noun: 1 incident, 3 incidents.
func Plural(n float64, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%.0f %ss", n, noun)
}

// Weights are pools' shares of new instances: "blue 90% / green 10%", or
// "none".
func Weights(w map[string]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(w)) {
		parts = append(parts, fmt.Sprintf("%s %d%%", k, w[k]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, " / ")
}
