package drain_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/camunda/zeebe/clients/go/v8/pkg/entities"
	"github.com/camunda/zeebe/clients/go/v8/pkg/worker"
	"github.com/camunda/zeebe/clients/go/v8/pkg/zbc"

	"github.com/shardctl/shardctl/internal/backlog"
	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/keyslot"
	"github.com/shardctl/shardctl/internal/load"
	"github.com/shardctl/shardctl/internal/registry"
	"github.com/shardctl/shardctl/internal/registry/registryapi"
	"github.com/shardctl/shardctl/internal/registry/registryclient"
	"github.com/shardctl/shardctl/internal/sim"
	"github.com/shardctl/shardctl/internal/sim/simtest"
	"github.com/shardctl/shardctl/migrate/drain"
)

// startRegistry runs a registry in-process and returns a client of it.
// The test goes on beside the other tests that have their own registry
// and shards (they wait on polls and workers).
func startRegistry(t *testing.T) *registryclient.Client {
	t.Helper()
	t.Parallel()
	s, err := registry.New(registry.Config{Listen: "127.0.0.1:0", Store: "memory"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(budget.Context(t, 5*time.Second)) })
	c, err := registryclient.New("http://"+s.Addr().String()+"/eureka", "")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// shard starts a simulator serving the REST API too and registers it
// (static: no heartbeat).
func shard(t *testing.T, c *registryclient.Client, id, pool string) *sim.Sim {
	t.Helper()
	return shardOf(t, c, id, pool, sim.DefaultVersion)
}

// shardOf is shard playing Zeebe v.
func shardOf(t *testing.T, c *registryclient.Client, id, pool string, v sim.Version) *sim.Sim {
	t.Helper()
	s := simtest.Start(t, sim.Config{Partitions: 2, TimerInterval: 20 * time.Millisecond, RESTListen: "127.0.0.1:0", Version: v})
	in, err := registryapi.NewShardInstance(registryapi.ShardRegistration{App: registryapi.DefaultShardsApp, ID: id, Address: s.Addr().String(),
		Pool: pool, Metrics: "http://" + s.MetricsAddr().String() + "/metrics", REST: "http://" + s.RESTAddr().String(), Static: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Register(budget.Context(t, 5*time.Second), in); err != nil {
		t.Fatal(err)
	}
	return s
}

// recorder keeps a drain's events.
type recorder struct {
	mu     sync.Mutex
	events []drain.Event
}

func (r *recorder) on(e drain.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func (r *recorder) of(kind, shard string) []drain.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []drain.Event
	for _, e := range r.events {
		if e.Event == kind && e.Shard == shard {
			out = append(out, e)
		}
	}
	return out
}

// until is an OnEvent that records, and calls then once an event of kind
// has been recorded.
func (r *recorder) until(kind string, then func()) func(drain.Event) {
	return func(e drain.Event) {
		r.on(e)
		if e.Event == kind {
			then()
		}
	}
}

// timeoutOnCue is the context of a wait the test makes time out: its
// deadline passes when the test calls timeout, once the wait has shown
// what the test waits for, rather than after a fixed time that would
// have to cover it on the slowest machine (and last as long on every
// one). Past budget.Of(limit) it times out uncued, so a wait that never
// shows it still ends.
func timeoutOnCue(t *testing.T, limit time.Duration) (ctx context.Context, timeout func()) {
	inner, cancel := context.WithCancel(context.Background())
	timer := time.AfterFunc(budget.Of(limit), cancel)
	t.Cleanup(func() {
		timer.Stop()
		cancel()
	})
	return cuedDeadline{inner}, cancel
}

// cuedDeadline ends as a deadline does: its Err is DeadlineExceeded.
type cuedDeadline struct{ context.Context }

func (c cuedDeadline) Err() error {
	if c.Context.Err() != nil {
		return context.DeadlineExceeded
	}
	return nil
}

func state(t *testing.T, c *registryclient.Client, id string) string {
	t.Helper()
	s, err := c.Shard(budget.Context(t, 5*time.Second), registryapi.DefaultShardsApp, id)
	if err != nil {
		t.Fatal(err)
	}
	return s.State
}

func deployAndStart(t *testing.T, zc zbc.Client, n int) {
	t.Helper()
	ctx := budget.Context(t, 30*time.Second)
	if _, err := zc.NewDeployResourceCommand().AddResource(load.Process("order", "pack", "ship"), "order.bpmn").Send(ctx); err != nil {
		t.Fatal(err)
	}
	for range n {
		if _, err := zc.NewCreateInstanceCommand().BPMNProcessId("order").LatestVersion().Send(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// A shard holding instances drains once workers finish them: it is
// reported with an ETA while it empties, and set OUT_OF_SERVICE after two
// empty polls; the other shard is not touched.
// It holds for the oldest and the newest Zeebe, whose metric names differ.
func TestDrainWaitsUntilEmpty(t *testing.T) { simtest.EachEnd(t, drainWaitsUntilEmpty) }

func drainWaitsUntilEmpty(t *testing.T, v sim.Version) {
	c := startRegistry(t)
	blue := shardOf(t, c, "blue-1", "blue", v)
	shardOf(t, c, "blue-2", "blue", v)
	zc := simtest.Client(t, blue.Addr().String())
	deployAndStart(t, zc, 40)

	rec := &recorder{}
	d := &drain.Helper{Registry: c, App: registryapi.DefaultShardsApp, Backlog: backlog.Scrape{}, Poll: 100 * time.Millisecond, StuckAfter: 50, OnEvent: rec.on}
	shards, err := d.Begin(budget.Context(t, 5*time.Second), []string{"blue-1"})
	if err != nil {
		t.Fatal(err)
	}
	if st := state(t, c, "blue-1"); st != registryapi.StateDraining {
		t.Fatalf("blue-1 is %s after Begin, want DRAINING", st)
	}
	// Workers that take a while: the drain sees the backlog fall.
	var done atomic.Int64
	for _, typ := range []string{"pack", "ship"} {
		w := zc.NewJobWorker().JobType(typ).Handler(func(jc worker.JobClient, job entities.Job) {
			time.Sleep(10 * time.Millisecond)
			if _, err := jc.NewCompleteJobCommand().JobKey(job.Key).Send(context.Background()); err == nil {
				done.Add(1)
			}
		}).MaxJobsActive(4).Concurrency(2).PollInterval(20 * time.Millisecond).RequestTimeout(time.Second).BackoffSupplier(load.Backoff()).Open()
		t.Cleanup(w.Close)
	}
	if err := d.Wait(budget.Context(t, 60*time.Second), shards); err != nil {
		t.Fatal(err)
	}
	if done.Load() != 80 {
		t.Errorf("the drain ended with %d of 80 jobs done", done.Load())
	}
	if st := state(t, c, "blue-1"); st != registryapi.StateOutOfService {
		t.Errorf("blue-1 is %s after the drain, want OUT_OF_SERVICE", st)
	}
	if st := state(t, c, "blue-2"); st != registryapi.StateUp {
		t.Errorf("blue-2 is %s, want UP: it was not drained", st)
	}
	progress := rec.of(drain.EventProgress, "blue-1")
	if len(progress) < 3 || progress[0].Backlog.InFlight == 0 {
		t.Fatalf("progress events %d, first %+v: want several, starting with instances in flight", len(progress), progress[0].Backlog)
	}
	withETA := 0
	for _, e := range progress {
		if e.ETASeconds != nil {
			withETA++
		}
		if !e.Backlog.Known() {
			t.Errorf("a poll of a healthy shard read unknown: %+v", e.Backlog)
		}
	}
	if withETA == 0 {
		t.Error("no progress event had an ETA while the shard emptied")
	}
	if got := rec.of(drain.EventEmpty, "blue-1"); len(got) != 1 || got[0].State != registryapi.StateOutOfService {
		t.Errorf("empty events %+v", got)
	}
	t.Logf("%d polls; first: %s", len(progress), progress[0].Line())
}

// An open incident holds a drain: it is named, with its key as clients
// of the proxy know it, within --stuck-after polls; at the timeout the
// shard is still DRAINING and the error says what is left.
// It holds for the oldest and the newest Zeebe, whose pending incidents
// gauges have different names.
func TestDrainNamesAnIncidentAndTimesOut(t *testing.T) {
	simtest.EachEnd(t, drainNamesAnIncidentAndTimesOut)
}

func drainNamesAnIncidentAndTimesOut(t *testing.T, v sim.Version) {
	c := startRegistry(t)
	blue := shardOf(t, c, "blue-1", "blue", v)
	zc := simtest.Client(t, blue.Addr().String())
	ctx := budget.Context(t, 30*time.Second)
	if _, err := zc.NewDeployResourceCommand().AddResource(load.Process("order", "pay"), "order.bpmn").Send(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := zc.NewCreateInstanceCommand().BPMNProcessId("order").LatestVersion().Send(ctx); err != nil {
		t.Fatal(err)
	}
	var jobKey int64
	budget.Eventually(t, 10*time.Second, "the job to be activated", func() bool {
		jobs, err := zc.NewActivateJobsCommand().JobType("pay").MaxJobsToActivate(1).Send(ctx)
		if err == nil && len(jobs) == 1 {
			jobKey = jobs[0].Key
		}
		return jobKey != 0
	})
	if _, err := zc.NewFailJobCommand().JobKey(jobKey).Retries(0).ErrorMessage("card declined").Send(ctx); err != nil {
		t.Fatal(err)
	}
	incidents, err := blue.Incidents(ctx)
	if err != nil || len(incidents) != 1 {
		t.Fatalf("incidents %v, %v", incidents, err)
	}

	shards, stuck, err := drainUntilStuck(t, c, "blue-1")
	var ne *drain.NotEmptyError
	if !errors.As(err, &ne) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait: %v, want a timed-out NotEmptyError", err)
	}
	if len(ne.Left) != 1 || ne.Left[0].Backlog.Incidents != 1 || !strings.Contains(err.Error(), "1 incident") {
		t.Errorf("what is left: %v", err)
	}
	if stuck[0].StalledPolls != 3 {
		t.Errorf("first stuck event after %d polls, want --stuck-after 3", stuck[0].StalledPolls)
	}
	key := keyslot.With(incidents[0].Key, shards[0].Slot)
	if got := strings.Join(stuck[0].Blockers, "; "); !strings.Contains(got, "1 incident open") || !strings.Contains(got, strconv.FormatInt(key, 10)) {
		t.Errorf("blockers %q: want the incident with key %d", got, key)
	}
	// Its instance is named, by the key a client of the proxy has, with
	// where it waits.
	instance := strconv.FormatInt(keyslot.With(incidents[0].ProcessInstanceKey, shards[0].Slot), 10)
	if w := stuck[0].Waiting; stuck[0].WaitingTotal != 1 || len(w) != 1 || w[0].Key != instance || w[0].ProcessID != "order" || !slices.Equal(w[0].Elements, []string{incidents[0].ElementID}) {
		t.Errorf("waiting %+v (%d in all), want instance %s of order in %s", w, stuck[0].WaitingTotal, instance, incidents[0].ElementID)
	}
	if want := "1 instance still running: " + instance + " (order, waiting in " + incidents[0].ElementID + ")"; stuck[0].Blockers[0] != want {
		t.Errorf("first blocker %q, want %q", stuck[0].Blockers[0], want)
	}
	if st := state(t, c, "blue-1"); st != registryapi.StateDraining {
		t.Errorf("blue-1 is %s after the timeout, want DRAINING", st)
	}
}

// drainUntilStuck drains a shard with --stuck-after 3 until it is stuck
// (or 10 s pass): the shards drained, the stuck events (at least one),
// and what the wait returned.
func drainUntilStuck(t *testing.T, c *registryclient.Client, id string) ([]registryapi.Shard, []drain.Event, error) {
	t.Helper()
	rec := &recorder{}
	wctx, timeout := timeoutOnCue(t, 10*time.Second)
	d := &drain.Helper{Registry: c, App: registryapi.DefaultShardsApp, Backlog: backlog.Scrape{}, Poll: 50 * time.Millisecond, StuckAfter: 3, OnEvent: rec.until(drain.EventStuck, timeout)}
	shards, err := d.Begin(budget.Context(t, 10*time.Second), []string{id})
	if err != nil {
		t.Fatal(err)
	}
	err = d.Wait(wctx, shards)
	stuck := rec.of(drain.EventStuck, id)
	if len(stuck) == 0 {
		t.Fatal("no stuck event though nothing moved")
	}
	return shards, stuck, err
}

// Missing data is never empty: a shard whose metrics cannot be read keeps
// the drain waiting, and says why.
func TestDrainWithoutMetricsWaits(t *testing.T) {
	c := startRegistry(t)
	shard(t, c, "blue-1", "blue")
	rec := &recorder{}
	unreachable := backlog.Scrape{URLs: map[string]string{"blue-1": "http://127.0.0.1:1/metrics"}}
	wctx, timeout := timeoutOnCue(t, 10*time.Second)
	d := &drain.Helper{Registry: c, App: registryapi.DefaultShardsApp, Backlog: unreachable, Poll: 50 * time.Millisecond, StuckAfter: 2, OnEvent: rec.until(drain.EventStuck, timeout)}
	shards, err := d.Begin(budget.Context(t, 5*time.Second), []string{"blue-1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Wait(wctx, shards); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait on a shard without metrics: %v, want it to time out", err)
	}
	stuck := rec.of(drain.EventStuck, "blue-1")
	if len(stuck) == 0 || !strings.Contains(stuck[0].Blockers[0], "cannot be read") {
		t.Errorf("stuck events %+v: want the unreadable metrics named", stuck)
	}
	if st := state(t, c, "blue-1"); st != registryapi.StateDraining {
		t.Errorf("blue-1 is %s, want DRAINING", st)
	}
}

// An unknown shard among known ones changes nothing.
func TestDrainUnknownShardChangesNothing(t *testing.T) {
	c := startRegistry(t)
	shard(t, c, "blue-1", "blue")
	d := &drain.Helper{Registry: c, App: registryapi.DefaultShardsApp, Backlog: backlog.Scrape{}}
	_, err := d.Begin(budget.Context(t, 5*time.Second), []string{"blue-1", "bleu-2"})
	if !errors.Is(err, registryapi.ErrNotFound) || !strings.Contains(err.Error(), "bleu-2") || !strings.Contains(err.Error(), "blue-1") {
		t.Fatalf("Begin with an unknown shard: %v; want not found, naming it and the known ones", err)
	}
	if st := state(t, c, "blue-1"); st != registryapi.StateUp {
		t.Errorf("blue-1 is %s after a refused drain, want UP", st)
	}
	if _, err := drain.Undrain(budget.Context(t, 5*time.Second), c, registryapi.DefaultShardsApp, []string{"nope"}); !errors.Is(err, registryapi.ErrNotFound) {
		t.Errorf("undrain of an unknown shard: %v", err)
	}
}

// A drain stuck on instances nobody works names them, oldest first, by
// the keys clients of the proxy know, with the element each waits in;
// past ten it counts the rest.
func TestDrainNamesTheInstancesLeft(t *testing.T) {
	c := startRegistry(t)
	blue := shard(t, c, "blue-1", "blue")
	zc := simtest.Client(t, blue.Addr().String())
	ctx := budget.Context(t, 30*time.Second)
	if _, err := zc.NewDeployResourceCommand().AddResource(load.Process("ship", "pack"), "ship.bpmn").Send(ctx); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for range 12 {
		inst, err := zc.NewCreateInstanceCommand().BPMNProcessId("ship").LatestVersion().Send(ctx)
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, strconv.FormatInt(inst.GetProcessInstanceKey(), 10))
	}
	shards, stuck, _ := drainUntilStuck(t, c, "blue-1")
	s := stuck[0]
	if s.WaitingTotal != 12 || len(s.Waiting) != 10 || !strings.HasPrefix(s.Blockers[0], "12 instances still running, the 10 oldest: ") {
		t.Fatalf("stuck: %d waiting in all, %d named, blockers %q", s.WaitingTotal, len(s.Waiting), s.Blockers)
	}
	for _, w := range s.Waiting {
		k, _ := strconv.ParseInt(w.Key, 10, 64)
		slot, raw := keyslot.Split(k)
		if slot != shards[0].Slot || !slices.Contains(keys, strconv.FormatInt(raw, 10)) || w.ProcessID != "ship" || len(w.Elements) != 1 || w.Started.IsZero() {
			t.Errorf("waiting %+v: want one of the instances created, with slot %d, in one element", w, shards[0].Slot)
		}
	}
	if !slices.IsSortedFunc(s.Waiting, func(a, b drain.Waiting) int { return a.Started.Compare(b.Started) }) {
		t.Errorf("not oldest first: %+v", s.Waiting)
	}
}
