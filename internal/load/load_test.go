package load_test

import (
	"context"
	"errors"
	"net/http"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/bpmn"
	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/load"
	"github.com/shardctl/shardctl/internal/proctest"
	"github.com/shardctl/shardctl/internal/sim"
	"github.com/shardctl/shardctl/internal/sim/simtest"
)

func TestMain(m *testing.M) { os.Exit(proctest.Main(m)) }

// clients are the two ways a load speaks to a simulator.
func clients(t *testing.T, s *sim.Sim) map[string]load.Client {
	hc := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(hc.CloseIdleConnections)
	return map[string]load.Client{
		"grpc": load.GRPC(simtest.Client(t, s.Addr().String())),
		"rest": load.REST("http://"+s.RESTAddr().String(), hc),
	}
}

// TestLoadCompletesOverBothProtocols: the same load, over gRPC and over
// REST, deploys, starts instances at its rate and completes every one.
func TestLoadCompletesOverBothProtocols(t *testing.T) {
	s := simtest.Start(t, sim.Config{Partitions: 2, RESTListen: "127.0.0.1:0"})
	for name, c := range clients(t, s) {
		t.Run(name, func(t *testing.T) {
			id := "load-" + name
			g := load.New(c, load.Config{ProcessID: id, JobTypes: []string{id + "-a", id + "-b"}, Rate: 50, Workers: 4})
			ctx := budget.Context(t, time.Minute)
			if err := g.Deploy(ctx); err != nil {
				t.Fatal(err)
			}
			run, stop := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() { defer close(done); g.Run(run) }()
			budget.Eventually(t, 20*time.Second, "50 instances to complete", func() bool { return g.Stats().Completed >= 50 })
			stop()
			<-done
			st := g.Stats()
			if st.Failed > 0 || st.Refused > 0 || st.Created < st.Completed {
				t.Errorf("%s: %+v", name, st)
			}
		})
	}
}

// TestRESTErrors: a creation refused for backpressure wraps ErrRefused;
// an unknown process is an error naming the problem.
func TestRESTErrors(t *testing.T) {
	s := simtest.Start(t, sim.Config{Partitions: 1, BacklogLimit: 1, RESTListen: "127.0.0.1:0"})
	c := clients(t, s)["rest"]
	ctx := budget.Context(t, 30*time.Second)
	if _, err := c.Create(ctx, "nothing-deployed"); err == nil || errors.Is(err, load.ErrRefused) {
		t.Errorf("create of an unknown process: %v, want a plain error", err)
	}
	if err := c.Deploy(ctx, "bp.bpmn", load.Process("bp", "bp-task")); err != nil {
		t.Fatal(err)
	}
	s.Pause(budget.Of(10 * time.Second))
	t.Cleanup(func() { _ = s.Resume() })
	go func() { _, _ = c.Create(ctx, "bp") }() // fills the paused partition's backlog
	budget.Eventually(t, 10*time.Second, "the partition to be full", func() bool { return s.QueueLength()[0] == 1 })
	if _, err := c.Create(ctx, "bp"); !errors.Is(err, load.ErrRefused) {
		t.Errorf("create on a full partition: %v, want ErrRefused", err)
	}
}

// A process in a line parses as the simulator reads it: each step its
// element, in order, a timer waiting its duration.
func TestProcessOf(t *testing.T) {
	for _, tc := range []struct {
		name  string
		data  []byte
		steps []string // job type, or the timer's wait
	}{
		{"tasks", load.Process("p", "a", "b"), []string{"a", "b"}},
		{"a timer between two tasks", load.ProcessOf("p", load.Task("a"), load.Timer("PT10M"), load.Task("b")), []string{"a", "10m0s", "b"}},
		{"nothing but a timer", load.ProcessOf("p", load.Timer("PT1S")), []string{"1s"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			procs, err := bpmn.Parse("p.bpmn", tc.data)
			if err != nil || len(procs) != 1 {
				t.Fatalf("parse: %v (%d processes)", err, len(procs))
			}
			var got []string
			for el := procs[0].NoneStart; len(el.Outgoing) == 1; {
				el = el.Outgoing[0].Target
				switch {
				case el.JobType != "":
					got = append(got, el.JobType)
				case el.TimerDuration > 0:
					got = append(got, el.TimerDuration.String())
				}
			}
			if !slices.Equal(got, tc.steps) {
				t.Errorf("steps %v, want %v", got, tc.steps)
			}
		})
	}
}
