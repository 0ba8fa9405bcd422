// Package procs sizes the Go runtime's P count (GOMAXPROCS) to the load
// of a process that serves many small calls, the proxy above all.
//
// Why: a lightly loaded server goes idle between nearly every event.
// With two Ps, a goroutine made ready while the other P is idle wakes a
// second thread (a futex), which spins looking for work, finds little,
// polls the network and goes back to sleep: at a few thousand events a
// second that churn costs more than the second P gives. Measured on the
// proxy's job path (bench-jobs), the sized proxy spent 0.89 and 0.95 of
// the CPU per job of one with two Ps. Under load a
// second P is worth having, so the Sizer runs one P while the process
// uses little CPU and every P the runtime would give it once it is busy.
// It imports nothing of this module.
package procs

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Config of a Sizer. Zero values take the defaults.
type Config struct {
	// Max is the most Ps the Sizer gives the process (default: the
	// runtime's own choice, runtime.GOMAXPROCS(0) when Start is called).
	Max int
	// Interval between two looks at the process's CPU use (default
	// 250 ms): the longest a burst runs on too few Ps.
	Interval time.Duration
	// Busy: the Sizer gives every P when the process used more than this
	// share of its current Ps over one interval (default 0.6).
	Busy float64
	// Idle: the Sizer takes a P away when the process would have used
	// less than this share of one P fewer for Calm intervals in a row
	// (defaults 0.3 and 8, i.e. 2 s).
	Idle float64
	Calm int

	// cpu is the process's CPU time so far, and set sets the P count
	// (tests replace them).
	cpu func() time.Duration
	set func(int)
}

func (c Config) withDefaults() Config {
	if c.Max <= 0 {
		c.Max = runtime.GOMAXPROCS(0)
	}
	if c.Interval <= 0 {
		c.Interval = 250 * time.Millisecond
	}
	if c.Busy <= 0 {
		c.Busy = 0.6
	}
	if c.Idle <= 0 {
		c.Idle = 0.3
	}
	if c.Calm <= 0 {
		c.Calm = 8
	}
	if c.set == nil {
		c.set = func(n int) { runtime.GOMAXPROCS(n) }
	}
	return c
}

// Sizer adjusts the P count from a goroutine of its own until Close.
type Sizer struct {
	cfg   Config
	procs atomic.Int64 // written by run only; read by Procs
	stop  chan struct{}
	done  chan struct{}
	once  sync.Once
}

// Start begins sizing with one P. GOMAXPROCS, from the environment or
// the runtime's default, is the most it gives (Max), not a count it
// keeps: a proxy is commonly run with GOMAXPROCS set to its CPU limit.
// It returns nil when there is nothing to size: the process has one P
// at most anyway, or the system does not say what CPU the process used
// (Windows).
func Start(cfg Config) *Sizer {
	cfg = cfg.withDefaults()
	if cfg.cpu == nil {
		cfg.cpu = processCPU
	}
	if cfg.Max <= 1 || cfg.cpu == nil {
		return nil
	}
	s := &Sizer{cfg: cfg, stop: make(chan struct{}), done: make(chan struct{})}
	s.procs.Store(1)
	cfg.set(1)
	go s.run()
	return s
}

// Procs is the P count the Sizer set last (nil Sizer: the runtime's).
func (s *Sizer) Procs() int {
	if s == nil {
		return runtime.GOMAXPROCS(0)
	}
	return int(s.procs.Load())
}

// Close stops sizing, gives the process every P again and waits for the
// Sizer's goroutine; safe twice, and on a nil Sizer.
func (s *Sizer) Close() {
	if s == nil {
		return
	}
	s.once.Do(func() { close(s.stop) })
	<-s.done
}

func (s *Sizer) run() {
	defer close(s.done)
	defer s.resize(s.cfg.Max)
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	var l load
	l.sample(s.cfg.cpu(), time.Now())
	for {
		select {
		case <-s.stop:
			return
		case now := <-t.C:
			used := l.sample(s.cfg.cpu(), now)
			s.resize(l.next(s.Procs(), used, s.cfg))
		}
	}
}

func (s *Sizer) resize(n int) {
	if s.procs.Swap(int64(n)) != int64(n) {
		s.cfg.set(n) // stops the world for a moment: only on a change
	}
}

// load follows the process's CPU use from one sample to the next.
type load struct {
	cpu  time.Duration
	at   time.Time
	calm int // intervals in a row that one P fewer would have served
}

// sample returns the CPU used since the last sample, in cores.
func (l *load) sample(cpu time.Duration, now time.Time) float64 {
	used := 0.0
	if dt := now.Sub(l.at); !l.at.IsZero() && dt > 0 {
		used = float64(cpu-l.cpu) / float64(dt)
	}
	l.cpu, l.at = cpu, now
	return used
}

// next is the P count for the next interval, with procs now and used
// cores in the last: every P at once when busy, one fewer only after
// Calm quiet intervals, so a burst is served at once and a lull does
// not shrink the process.
func (l *load) next(procs int, used float64, cfg Config) int {
	switch {
	case used > cfg.Busy*float64(procs):
		l.calm = 0
		return cfg.Max
	case procs > 1 && used < cfg.Idle*float64(procs-1):
		l.calm++
		if l.calm >= cfg.Calm {
			l.calm = 0
			return procs - 1
		}
	default:
		l.calm = 0
	}
	return procs
}
