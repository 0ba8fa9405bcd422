package budget

import (
	"runtime"
	"testing"
	"time"
)

func TestOfStretchesNeverShrinks(t *testing.T) {
	first := Of(10 * time.Second)
	if first < 10*time.Second {
		t.Fatalf("Of(10s) = %v, shorter than a quiet core needs", first)
	}
	runtime.KeepAlive(work())
	if again := Of(10 * time.Second); again < first {
		t.Errorf("Of(10s) went down from %v to %v within one process", first, again)
	}
	t.Logf("slowdown here and now: %.2f× (work took %v)", Slowdown(), time.Duration(Slowdown()/Declared()*float64(quietWork)).Round(time.Microsecond))
}

func TestEnvSlowdownMultiplies(t *testing.T) {
	base := Slowdown()
	t.Setenv(EnvSlowdown, "3")
	if got := Slowdown(); got < 3*base*0.999 {
		t.Errorf("with %s=3: %.2f, want at least 3 × %.2f", EnvSlowdown, got, base)
	}
	for _, bad := range []string{"0.5", "x", "-2", "+Inf"} {
		t.Setenv(EnvSlowdown, bad)
		if got := Declared(); got != 1 {
			t.Errorf("%s=%q: multiplier %v, want it ignored", EnvSlowdown, bad, got)
		}
	}
}

func TestWait(t *testing.T) {
	n := 0
	if err := Wait(time.Second, func() bool { n++; return n == 3 }); err != nil {
		t.Errorf("a condition that holds on the third look: %v", err)
	}
	if err := Wait(20*time.Millisecond, func() bool { return false }); err == nil {
		t.Error("a condition that never holds did not time out")
	}
}
