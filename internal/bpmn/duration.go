package bpmn

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// errCalendarDuration is a duration in years or months: their length
// depends on the date they are added to, and a timer here waits a fixed
// time.Duration.
var errCalendarDuration = errors.New("years and months are not supported by the simulator")

// parseDuration reads an ISO-8601 duration as Zeebe reads a timer's
// timeDuration: weeks and days, then after a T hours, minutes and seconds,
// the seconds with up to nine fraction digits (PT0.5S, P1D, PT1H30M).
// Letters may be lower case, as java.time accepts them. A day is 24 hours.
func parseDuration(text string) (time.Duration, error) {
	s := strings.ToUpper(strings.TrimSpace(text))
	rest, ok := strings.CutPrefix(s, "P")
	if !ok || rest == "" {
		return 0, fmt.Errorf("%q is not an ISO-8601 duration (like PT10M)", text)
	}
	date, clock, hasClock := strings.Cut(rest, "T")
	if hasClock && clock == "" {
		return 0, fmt.Errorf("%q is not an ISO-8601 duration: nothing follows T", text)
	}
	dateFields, err := durationFields(date, "YMWD")
	if err != nil {
		return 0, fmt.Errorf("%q is not an ISO-8601 duration: %v", text, err)
	}
	clockFields, err := durationFields(clock, "HMS")
	if err != nil {
		return 0, fmt.Errorf("%q is not an ISO-8601 duration: %v", text, err)
	}
	if dateFields['Y'] != "" || dateFields['M'] != "" {
		return 0, fmt.Errorf("duration %q: %w", text, errCalendarDuration)
	}
	var total time.Duration
	for _, part := range []struct {
		value string
		unit  time.Duration
	}{
		{dateFields['W'], 7 * 24 * time.Hour},
		{dateFields['D'], 24 * time.Hour},
		{clockFields['H'], time.Hour},
		{clockFields['M'], time.Minute},
		{clockFields['S'], time.Second},
	} {
		if part.value == "" {
			continue
		}
		d, err := durationPart(part.value, part.unit)
		if err != nil {
			return 0, fmt.Errorf("%q is not an ISO-8601 duration: %v", text, err)
		}
		if d > math.MaxInt64-total {
			return 0, fmt.Errorf("duration %q is too long (at most %v)", text, time.Duration(math.MaxInt64))
		}
		total += d
	}
	return total, nil
}

// durationFields splits one part of a duration ("1W2D", "1H30.5S") into
// its numbers by designator. Designators must come in the order given,
// each once, as ISO-8601 writes them.
func durationFields(s, designators string) (map[byte]string, error) {
	out := map[byte]string{}
	for s != "" {
		n := strings.IndexFunc(s, func(r rune) bool { return (r < '0' || r > '9') && r != '.' && r != ',' })
		switch {
		case n < 0:
			return nil, fmt.Errorf("%q has no designator after it", s)
		case n == 0:
			return nil, fmt.Errorf("expected a number at %q", s)
		}
		at := strings.IndexByte(designators, s[n])
		if at < 0 {
			return nil, fmt.Errorf("unexpected %q", s[n:n+1])
		}
		out[s[n]] = s[:n]
		designators = designators[at+1:]
		s = s[n+1:]
	}
	return out, nil
}

// durationPart is a number of units; only seconds may have a fraction.
func durationPart(value string, unit time.Duration) (time.Duration, error) {
	whole, frac, hasFrac := strings.Cut(strings.ReplaceAll(value, ",", "."), ".")
	if hasFrac && unit != time.Second {
		return 0, fmt.Errorf("only seconds may have a fraction, not %q", value)
	}
	if whole == "" || strings.ContainsAny(frac, ".") || len(frac) > 9 {
		return 0, fmt.Errorf("bad number %q", value)
	}
	n, err := strconv.ParseInt(whole, 10, 64)
	if err != nil || n > int64(math.MaxInt64/unit) {
		return 0, fmt.Errorf("%q is too large", value)
	}
	d := time.Duration(n) * unit
	if frac != "" {
		nanos, _ := strconv.ParseInt(frac+strings.Repeat("0", 9-len(frac)), 10, 64)
		if d > math.MaxInt64-time.Duration(nanos) {
			return 0, fmt.Errorf("%q is too large", value)
		}
		d += time.Duration(nanos)
	}
	return d, nil
}
