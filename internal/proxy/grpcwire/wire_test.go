package grpcwire

import (
	"math"
	"testing"
	"time"
)

// grpc-timeout as gRPC's HTTP/2 protocol spells it: at most eight digits
// and one unit; what the proxy writes upstream it can read back, rounded
// up so a call never loses time on the way.
func TestTimeoutCodec(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		bad  bool
	}{
		{in: "1H", want: time.Hour},
		{in: "2M", want: 2 * time.Minute},
		{in: "30S", want: 30 * time.Second},
		{in: "250m", want: 250 * time.Millisecond},
		{in: "7u", want: 7 * time.Microsecond},
		{in: "99999999n", want: 99999999},
		{in: "99999999H", want: math.MaxInt64},
		{in: "2562047H", want: 2562047 * time.Hour},
		{in: "", bad: true},
		{in: "5", bad: true},
		{in: "m", bad: true},
		{in: "123456789S", bad: true},
		{in: "-1S", bad: true},
		{in: "10s", bad: true},
		{in: "1.5S", bad: true},
	} {
		got, err := ParseTimeout(tc.in)
		if tc.bad {
			if err == nil {
				t.Errorf("ParseTimeout(%q) = %v, want an error", tc.in, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseTimeout(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	for _, d := range []time.Duration{-time.Second, 0, 1, 999, time.Microsecond + 1, 3 * time.Second, 150 * time.Millisecond, 1000 * time.Hour} {
		s := FormatTimeout(d)
		back, err := ParseTimeout(s)
		if err != nil {
			t.Fatalf("FormatTimeout(%v) = %q, which does not parse: %v", d, s, err)
		}
		if want := max(d, 1); back < want || back-want > want/1e5 {
			t.Errorf("FormatTimeout(%v) = %q reads back as %v", d, s, back)
		}
	}
	if testing.AllocsPerRun(100, func() { _, _ = ParseTimeout("250m") }) != 0 {
		t.Error("ParseTimeout allocates on a well-formed value")
	}
}
