package procs

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/budget"
)

func TestNext(t *testing.T) {
	cfg := Config{Max: 4}.withDefaults()
	tests := []struct {
		name  string
		procs int
		used  []float64 // cores used in the intervals, in order
		want  []int     // the P count after each
	}{
		{"quiet stays on one P", 1, []float64{0, 0.1, 0.5, 0.6}, []int{1, 1, 1, 1}},
		{"busy on one P takes every P at once", 1, []float64{0.61}, []int{4}},
		{"busy on four takes nothing away", 4, []float64{3, 2.5, 1}, []int{4, 4, 4}},
		{"a lull of fewer than Calm intervals keeps every P", 4, []float64{0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 3, 0.1}, []int{4, 4, 4, 4, 4, 4, 4, 4, 4}},
		{"Calm quiet intervals take one P away", 2, []float64{0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2}, []int{2, 2, 2, 2, 2, 2, 2, 1}},
		{"between the thresholds nothing changes", 2, []float64{0.45, 0.45, 0.45, 0.45, 0.45, 0.45, 0.45, 0.45, 0.45}, []int{2, 2, 2, 2, 2, 2, 2, 2, 2}},
		{"a busy interval resets the count", 2, []float64{0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 1.3, 0.2}, []int{2, 2, 2, 2, 2, 2, 2, 4, 4}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var l load
			procs := tt.procs
			for i, used := range tt.used {
				procs = l.next(procs, used, cfg)
				if procs != tt.want[i] {
					t.Fatalf("interval %d (%.2f cores used): %d Ps, want %d", i, used, procs, tt.want[i])
				}
			}
		})
	}
}

func TestSample(t *testing.T) {
	var l load
	at := time.Unix(1000, 0)
	if got := l.sample(5*time.Second, at); got != 0 {
		t.Fatalf("first sample: %v cores, want 0 (nothing to compare with)", got)
	}
	if got := l.sample(5*time.Second+150*time.Millisecond, at.Add(100*time.Millisecond)); got != 1.5 {
		t.Fatalf("150 ms of CPU in 100 ms: %v cores, want 1.5", got)
	}
}

// fakeProcess is a process whose CPU use the test sets and whose P
// count the Sizer sets.
type fakeProcess struct {
	mu    sync.Mutex
	cpu   time.Duration
	rate  float64 // cores used from now on
	since time.Time
	procs int // the P count set last
}

func (p *fakeProcess) use(cores float64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cpu += time.Duration(p.rate * float64(time.Since(p.since)))
	p.rate, p.since = cores, time.Now()
}

func (p *fakeProcess) cpuTime() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cpu + time.Duration(p.rate*float64(time.Since(p.since)))
}

func (p *fakeProcess) set(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.procs = n
}

func (p *fakeProcess) last() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.procs
}

func TestSizer(t *testing.T) {
	p := &fakeProcess{since: time.Now()}
	s := Start(Config{Max: 2, Interval: 5 * time.Millisecond, Calm: 3, cpu: p.cpuTime, set: p.set})
	if s == nil {
		t.Fatal("Start returned nil with two Ps to size")
	}
	defer s.Close()
	if got := p.last(); got != 1 {
		t.Fatalf("started with %d Ps, want 1", got)
	}
	waitFor := func(want int, why string) {
		t.Helper()
		budget.Eventually(t, 10*time.Second, fmt.Sprintf("%d Ps when %s", want, why), func() bool {
			return s.Procs() == want && p.last() == want
		})
	}
	p.use(0.9)
	waitFor(2, "busy")
	p.use(0.05)
	waitFor(1, "quiet")
	s.Close()
	s.Close() // safe twice
	if got := p.last(); got != 2 {
		t.Fatalf("after Close: %d Ps, want every P (2)", got)
	}
	var nilSizer *Sizer
	nilSizer.Close()
	if nilSizer.Procs() != runtime.GOMAXPROCS(0) {
		t.Fatal("a nil Sizer's Procs is not the runtime's")
	}
}

func TestStartWithOneP(t *testing.T) {
	if s := Start(Config{Max: 1, set: func(int) { t.Fatal("a process with one P was resized") }}); s != nil {
		s.Close()
		t.Fatal("Start sized a process with one P")
	}
}

// TestRealRuntime sizes this test process and gives its Ps back.
func TestRealRuntime(t *testing.T) {
	before := runtime.GOMAXPROCS(0)
	if before < 2 {
		t.Skip("one CPU: nothing to size")
	}
	s := Start(Config{Interval: time.Hour})
	if got := runtime.GOMAXPROCS(0); got != 1 {
		t.Errorf("after Start: GOMAXPROCS %d, want 1", got)
	}
	s.Close()
	if got := runtime.GOMAXPROCS(0); got != before {
		t.Errorf("after Close: GOMAXPROCS %d, want %d", got, before)
	}
}
