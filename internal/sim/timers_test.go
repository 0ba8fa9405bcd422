package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/camunda/zeebe/clients/go/v8/pkg/zbc"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/search"
)

// timerProcess is start -> task a -> timer catch event "wait" (an ISO-8601
// duration) -> task b -> end.
func timerProcess(id, duration string) []byte {
	return []byte(bpmnHead + fmt.Sprintf(`<bpmn:process id="%s" isExecutable="true"><bpmn:startEvent id="start"/>
`, id) + serviceTask("a", "a", 3) + fmt.Sprintf(`<bpmn:intermediateCatchEvent id="wait"><bpmn:timerEventDefinition><bpmn:timeDuration xsi:type="bpmn:tFormalExpression">%s</bpmn:timeDuration></bpmn:timerEventDefinition></bpmn:intermediateCatchEvent>
`, duration) + serviceTask("b", "b", 3) + `<bpmn:endEvent id="end"/>
` + flow("f1", "start", "a") + flow("f2", "a", "wait") + flow("f3", "wait", "b") + flow("f4", "b", "end") + `</bpmn:process></bpmn:definitions>`)
}

// positions are a partition's log positions as its metrics report them.
type positions struct{ appended, committed, processed float64 }

func logPositions(t testing.TB, s *Sim) positions {
	t.Helper()
	page := scrapeAll(t, s)
	return positions{
		appended:  metricValue(page, "zeebe_log_appender_last_appended_position"),
		committed: metricValue(page, "zeebe_log_appender_last_committed_position"),
		processed: metricValue(page, "zeebe_stream_processor_last_processed_position"),
	}
}

// settledPositions waits for a partition to process what it appended (a
// command's answer can reach the client before its position is counted)
// and returns its positions then.
func settledPositions(t testing.TB, s *Sim) positions {
	t.Helper()
	var got positions
	budget.Eventually(t, 5*time.Second, "every record to be processed", func() bool {
		got = logPositions(t, s)
		return got.processed == got.appended
	})
	return got
}

// waitingTimers are the exported element instances of timer catch events
// that wait, as a search reads them (no record written): the first page
// and how many there are.
func waitingTimers(t testing.TB, s *Sim) ([]map[string]any, float64) {
	t.Helper()
	q, err := search.Parse(search.ElementInstances, []byte(`{"filter":{"elementId":"wait","state":"ACTIVE"}}`))
	if err != nil {
		t.Fatal(err)
	}
	a, err := queries{s.cluster}.Search(context.Background(), search.ElementInstances, q)
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		Items []map[string]any
		Page  struct{ TotalItems float64 }
	}
	if err := json.Unmarshal(a.Body, &res); err != nil {
		t.Fatalf("%v: %s", err, a.Body)
	}
	return res.Items, res.Page.TotalItems
}

// An instance waits on its timer for the duration, writing nothing while
// it waits, then moves on; the catch event is counted as Zeebe counts it.
func TestTimerCatchEventWaits(t *testing.T) {
	const wait = time.Second
	s := startSim(t, Config{Partitions: 1, TimerInterval: 20 * time.Millisecond})
	c := newClient(t, s)
	ctx := budget.Context(t, 30*time.Second)
	deploy(t, c, "timer.bpmn", timerProcess("timer", "PT1S"))
	inst := create(t, c, "timer", nil)
	a := activateOne(t, c, "a")

	before := time.Now() // the timer is scheduled after this
	if _, err := c.NewCompleteJobCommand().JobKey(a.Key).Send(ctx); err != nil {
		t.Fatal(err)
	}
	waiting := settledPositions(t, s)
	if items, _ := waitingTimers(t, s); len(items) != 1 || items[0]["type"] != "INTERMEDIATE_CATCH_EVENT" || items[0]["processInstanceKey"] != fmt.Sprint(inst) {
		t.Errorf("waiting timer element instances: %v, want the instance's catch event ACTIVE", items)
	}
	for range 3 {
		time.Sleep(wait / 6) // several due checks
		if time.Since(before) >= wait {
			break // a slow machine: the timer may have fallen due
		}
		if got := logPositions(t, s); got != waiting {
			t.Fatalf("positions moved while the timer waits: %+v, then %+v", waiting, got)
		}
	}

	b := activateOne(t, c, "b")
	if waited := time.Since(before); waited < wait {
		t.Errorf("task b after %v, before the timer's %v", waited, wait)
	}
	if _, err := c.NewCompleteJobCommand().JobKey(b.Key).Send(ctx); err != nil {
		t.Fatal(err)
	}
	budget.Eventually(t, 5*time.Second, "the instance to complete", func() bool {
		return scrape(t, s, "zeebe_element_instance_events_total", `action="completed"`, `type="PROCESS"`) == 1
	})
	page := scrapeAll(t, s)
	for _, action := range []string{"activated", "completed"} {
		if got := metricValue(page, "zeebe_element_instance_events_total", `action="`+action+`"`, `type="INTERMEDIATE_CATCH_EVENT"`); got != 1 {
			t.Errorf("INTERMEDIATE_CATCH_EVENT %s = %v, want 1", action, got)
		}
	}
	if items, _ := waitingTimers(t, s); len(items) != 0 {
		t.Errorf("timer still exported as waiting: %v", items)
	}
}

// Cancelling an instance that waits on a timer ends it; the timer never
// fires, including one cancelled after it fell due and before its trigger
// was processed.
func TestTimerCatchEventCancel(t *testing.T) {
	tests := []struct {
		name string
		// cancel ends the instance, whose timer waits on partition 1.
		cancel func(t *testing.T, s *Sim, c zbc.Client, inst int64)
	}{
		{"while waiting", func(t *testing.T, _ *Sim, c zbc.Client, inst int64) {
			if _, err := c.NewCancelInstanceCommand().ProcessInstanceKey(inst).Send(context.Background()); err != nil {
				t.Fatal(err)
			}
		}},
		{"once due, its trigger queued", func(t *testing.T, s *Sim, _ zbc.Client, inst int64) {
			onPartitions(t, s, func(p *partition) []int {
				for _, tm := range p.state.timers {
					tm.due = time.Time{} // every one equal: still a heap
				}
				p.checkDue()
				if len(p.state.timers) != 0 || p.queueLen() == 0 {
					t.Errorf("due check left %d timers waiting, %d records queued", len(p.state.timers), p.queueLen())
				}
				p.terminate(p.state.instances[inst])
				return nil
			})
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := startSim(t, Config{Partitions: 1, TimerInterval: 20 * time.Millisecond})
			c := newClient(t, s)
			deploy(t, c, "timer.bpmn", timerProcess("timer", "PT0.5S"))
			inst := create(t, c, "timer", nil)
			if _, err := c.NewCompleteJobCommand().JobKey(activateOne(t, c, "a").Key).Send(context.Background()); err != nil {
				t.Fatal(err)
			}
			tt.cancel(t, s, c, inst)

			time.Sleep(700 * time.Millisecond) // past the duration, many due checks
			if jobs := activate(t, c, "b", 1, time.Minute); len(jobs) != 0 {
				t.Errorf("the timer of a cancelled instance fired: job %+v", jobs[0])
			}
			page := scrapeAll(t, s)
			if got := metricValue(page, "zeebe_element_instance_events_total", `action="terminated"`, `type="INTERMEDIATE_CATCH_EVENT"`); got != 1 {
				t.Errorf("catch events terminated = %v, want 1", got)
			}
			if got := metricValue(page, "zeebe_element_instance_events_total", `action="completed"`, `type="INTERMEDIATE_CATCH_EVENT"`); got != 0 {
				t.Errorf("catch events completed = %v, want 0", got)
			}
			if n := activeInstances(t, s); n != 0 {
				t.Errorf("%d instances active", n)
			}
			if left := onPartitions(t, s, func(p *partition) []*timer { return p.state.timers }); len(left) != 0 {
				t.Errorf("%d timers left waiting", len(left))
			}
			if items, _ := waitingTimers(t, s); len(items) != 0 {
				t.Errorf("timer still exported as waiting: %v", items)
			}
		})
	}
}

// Thousands of instances waiting on timers cost the partition nothing
// between records: no record is written while they wait, however many
// due checks pass, and cancelling them empties the heap.
func TestManyTimersWait(t *testing.T) {
	const n = 2000
	s := startSim(t, Config{Partitions: 2, TimerInterval: 10 * time.Millisecond})
	c := newClient(t, s)
	deploy(t, c, "hour.bpmn", []byte(bpmnHead+`<bpmn:process id="hour" isExecutable="true"><bpmn:startEvent id="start"/>
<bpmn:intermediateCatchEvent id="wait"><bpmn:timerEventDefinition><bpmn:timeDuration>PT1H</bpmn:timeDuration></bpmn:timerEventDefinition></bpmn:intermediateCatchEvent>
<bpmn:endEvent id="end"/>`+flow("f1", "start", "wait")+flow("f2", "wait", "end")+`</bpmn:process></bpmn:definitions>`))
	keys := make(chan int64, n)
	var failed atomic.Int64
	runConcurrently(t, n, func() error {
		resp, err := c.NewCreateInstanceCommand().BPMNProcessId("hour").LatestVersion().Send(context.Background())
		if err != nil {
			failed.Add(1)
			return err
		}
		keys <- resp.ProcessInstanceKey
		return nil
	})
	if failed.Load() > 0 {
		t.Fatalf("%d creations failed", failed.Load())
	}
	if _, total := waitingTimers(t, s); total != n {
		t.Fatalf("%v timers exported as waiting, want %d", total, n)
	}
	before := settledPositions(t, s)
	time.Sleep(200 * time.Millisecond) // twenty due checks
	if after := logPositions(t, s); after != before {
		t.Errorf("positions moved with %d timers waiting an hour: %+v, then %+v", n, before, after)
	}

	close(keys)
	for key := range keys {
		if _, err := c.NewCancelInstanceCommand().ProcessInstanceKey(key).Send(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if left := onPartitions(t, s, func(p *partition) []*timer { return p.state.timers }); len(left) != 0 {
		t.Errorf("%d timers left after cancelling every instance", len(left))
	}
}

// BenchmarkDueCheck is one due check with 36,000 timers waiting (60
// instances/s on a ten-minute timer), none due: it reads the earliest.
func BenchmarkDueCheck(b *testing.B) {
	p := &partition{state: newState()}
	start := time.Now()
	for i := range 36_000 {
		p.state.timers = append(p.state.timers, &timer{due: start.Add(time.Hour + time.Duration(i)*time.Millisecond), index: i})
	}
	b.ReportAllocs()
	for b.Loop() {
		p.checkDue()
	}
}
