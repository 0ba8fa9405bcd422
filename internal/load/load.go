// Package load offers a Zeebe cluster (or the proxy) work at a fixed
// rate, the way a fleet of clients does: creations are sent on a clock
// whatever the answers take (an overloaded cluster's clients keep
// sending), and a job worker completes every job it is given. The signal
// tests, the advisor's timing runs, the demo and the capacity probe drive
// shards with it.
// It imports no runtime and none of the tools: the demo and the capacity
// probe both drive it.
package load

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/camunda/zeebe/clients/go/v8/pkg/worker"
)

// DefinitionsHead opens a BPMN document with the bpmn and zeebe
// namespaces; a process and "</bpmn:definitions>" complete it.
const DefinitionsHead = `<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL" xmlns:zeebe="http://camunda.org/schema/zeebe/1.0" id="d" targetNamespace="t">
`

// Process is a BPMN process of one service task per job type, in a line.
func Process(id string, jobTypes ...string) []byte {
	steps := make([]Step, len(jobTypes))
	for i, typ := range jobTypes {
		steps[i] = Task(typ)
	}
	return ProcessOf(id, steps...)
}

// Step is one element of a process in a line: a service task or a
// timer to wait on.
type Step struct {
	jobType string // a service task's
	timer   string // an ISO 8601 duration to wait
}

// Task is a service task of a job type.
func Task(jobType string) Step { return Step{jobType: jobType} }

// Timer is an intermediate timer catch event of an ISO 8601 duration
// ("PT10M"): the instance waits there, holding no job and writing no
// record until it fires.
func Timer(duration string) Step { return Step{timer: duration} }

// ProcessOf is a BPMN process of the steps, in a line.
func ProcessOf(id string, steps ...Step) []byte {
	var b strings.Builder
	b.WriteString(DefinitionsHead)
	fmt.Fprintf(&b, `<bpmn:process id="%s" isExecutable="true"><bpmn:startEvent id="start"/>`, id)
	prev := "start"
	for i, st := range steps {
		el := fmt.Sprintf("t%d", i+1)
		if st.timer != "" {
			fmt.Fprintf(&b, `<bpmn:intermediateCatchEvent id="%s"><bpmn:timerEventDefinition><bpmn:timeDuration>%s</bpmn:timeDuration></bpmn:timerEventDefinition></bpmn:intermediateCatchEvent>`, el, st.timer)
		} else {
			fmt.Fprintf(&b, `<bpmn:serviceTask id="%s"><bpmn:extensionElements><zeebe:taskDefinition type="%s"/></bpmn:extensionElements></bpmn:serviceTask>`, el, st.jobType)
		}
		fmt.Fprintf(&b, `<bpmn:sequenceFlow id="f%s" sourceRef="%s" targetRef="%s"/>`, el, prev, el)
		prev = el
	}
	fmt.Fprintf(&b, `<bpmn:endEvent id="end"/><bpmn:sequenceFlow id="fend" sourceRef="%s" targetRef="end"/></bpmn:process></bpmn:definitions>`, prev)
	return []byte(b.String())
}

// Backoff is a polling backoff of its own for one job worker. The
// client's default is one value shared by every worker in the process,
// and its random source is not safe for concurrent use: two workers
// backing off at once (a shard killed under them) race on it.
func Backoff() worker.BackoffSupplier { return worker.NewExponentialBackoffBuilder().Build() }

// Config of a load.
type Config struct {
	ProcessID string
	// JobType is the process's one task; JobTypes, when set, are several
	// in a line, and an instance completes with its last.
	JobType  string
	JobTypes []string
	// Process is the BPMN to deploy (ProcessID names its process); nil is
	// a line of a service task per job type. Final are the job types whose
	// completion completes an instance (default the last).
	Process []byte
	Final   []string
	// Workers is each job worker's concurrency (default 16).
	Workers int
	// Stream has the job workers take jobs pushed on a stream (Zeebe
	// 8.4+), polling only for jobs the stream missed.
	Stream bool
	// OnCreate hears every creation's answer (the instance's key, 0 when
	// it failed) and how long it took, and OnComplete every instance
	// completed, as they come (from many goroutines).
	OnCreate   func(key int64, took time.Duration, err error)
	OnComplete func(key int64)
	// Rate is process instances offered per second.
	Rate float64
	// MaxInFlight bounds the creations awaiting an answer; an offer that
	// finds none free is counted as Skipped instead of piling up.
	MaxInFlight int
	// Timeout of one creation (default 10 s).
	Timeout time.Duration
}

// Stats are a load's counts so far: Completed counts instances (their
// final job done).
type Stats struct {
	Offered, Created, Refused, Failed, Skipped, Completed int64
}

// Generator offers instances and completes their jobs.
type Generator struct {
	c    Client
	cfg  Config
	rate atomic.Uint64 // math.Float64bits of the rate

	offered, created, refused, failed, skipped, completed atomic.Int64
}

// New prepares a load on a client (GRPC or REST); Run starts it.
func New(c Client, cfg Config) *Generator {
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = 1024
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if len(cfg.JobTypes) == 0 {
		cfg.JobTypes = []string{cfg.JobType}
	}
	if len(cfg.Final) == 0 {
		cfg.Final = cfg.JobTypes[len(cfg.JobTypes)-1:]
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 16
	}
	g := &Generator{c: c, cfg: cfg}
	g.SetRate(cfg.Rate)
	return g
}

// SetRate changes the offered rate while the load runs.
func (g *Generator) SetRate(perSec float64) { g.rate.Store(uint64(perSec * 1000)) }

func (g *Generator) currentRate() float64 { return float64(g.rate.Load()) / 1000 }

// Deploy deploys the load's process.
func (g *Generator) Deploy(ctx context.Context) error {
	bpmn := g.cfg.Process
	if bpmn == nil {
		bpmn = Process(g.cfg.ProcessID, g.cfg.JobTypes...)
	}
	return g.c.Deploy(ctx, g.cfg.ProcessID+".bpmn", bpmn)
}

// Run offers instances at the rate and completes jobs until ctx ends;
// calls still in flight then are cancelled.
func (g *Generator) Run(ctx context.Context) {
	// Calls in flight end with the load: a stopped load must not wait out
	// an overloaded cluster's answers.
	var workers []Worker
	for _, typ := range g.cfg.JobTypes {
		workers = append(workers, Worker{JobType: typ, Concurrency: g.cfg.Workers, Stream: g.cfg.Stream, Timeout: g.cfg.Timeout})
	}
	defer workAll(ctx, g.c, workers, func(w Worker, instanceKey int64) {
		if slices.Contains(g.cfg.Final, w.JobType) {
			g.completed.Add(1)
			if g.cfg.OnComplete != nil {
				g.cfg.OnComplete(instanceKey)
			}
		}
	})()

	slots := make(chan struct{}, g.cfg.MaxInFlight)
	var wg sync.WaitGroup
	defer wg.Wait()
	next := time.Now()
	for {
		rate := g.currentRate()
		if rate <= 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
				next = time.Now()
				continue
			}
		}
		next = next.Add(time.Duration(float64(time.Second) / rate))
		if d := time.Until(next); d > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(d):
			}
		} else if ctx.Err() != nil {
			return
		}
		g.offered.Add(1)
		select {
		case slots <- struct{}{}:
		default:
			g.skipped.Add(1)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			cctx, cancel := context.WithTimeout(ctx, g.cfg.Timeout)
			defer cancel()
			start := time.Now()
			key, err := g.c.Create(cctx, g.cfg.ProcessID)
			if g.cfg.OnCreate != nil && ctx.Err() == nil {
				g.cfg.OnCreate(key, time.Since(start), err)
			}
			switch {
			case ctx.Err() != nil:
				// stopped: neither created nor refused as far as we know
			case err == nil:
				g.created.Add(1)
			case errors.Is(err, ErrRefused):
				g.refused.Add(1)
			default:
				g.failed.Add(1)
			}
		}()
	}
}

// Stats reads the counts so far.
func (g *Generator) Stats() Stats {
	return Stats{Offered: g.offered.Load(), Created: g.created.Load(), Refused: g.refused.Load(),
		Failed: g.failed.Load(), Skipped: g.skipped.Load(), Completed: g.completed.Load()}
}
