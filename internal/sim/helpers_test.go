package sim

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/camunda/zeebe/clients/go/v8/pkg/zbc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/shardctl/shardctl/internal/budget"
)

// startSim runs a simulator on free loopback ports for one test.
func startSim(t testing.TB, cfg Config) *Sim {
	t.Helper()
	cfg.Listen = "127.0.0.1:0"
	cfg.MetricsListen = "127.0.0.1:0"
	if cfg.TimerInterval == 0 {
		cfg.TimerInterval = 100 * time.Millisecond
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), budget.Of(time.Second))
		defer cancel()
		_ = s.Close(ctx)
	})
	return s
}

// newClient is the real Zeebe Go client, as users run it.
func newClient(t testing.TB, s *Sim) zbc.Client {
	t.Helper()
	t.Setenv("ZEEBE_CLIENT_ID", "") // never try OAuth from the environment
	c, err := zbc.NewClient(&zbc.ClientConfig{GatewayAddress: s.Addr().String(), UsePlaintextConnection: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

const bpmnHead = `<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL" xmlns:zeebe="http://camunda.org/schema/zeebe/1.0" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" id="d" targetNamespace="t">
`

func serviceTask(id, jobType string, retries int) string {
	return fmt.Sprintf(`<bpmn:serviceTask id="%s"><bpmn:extensionElements><zeebe:taskDefinition type="%s" retries="%d"/></bpmn:extensionElements></bpmn:serviceTask>
`, id, jobType, retries)
}

func flow(id, from, to string) string {
	return fmt.Sprintf(`<bpmn:sequenceFlow id="%s" sourceRef="%s" targetRef="%s"/>
`, id, from, to)
}

// linearProcess is start -> task types[0] -> ... -> end.
func linearProcess(id string, retries int, types ...string) []byte {
	var b strings.Builder
	b.WriteString(bpmnHead)
	fmt.Fprintf(&b, `<bpmn:process id="%s" isExecutable="true"><bpmn:startEvent id="start"/>
`, id)
	prev := "start"
	for i, typ := range types {
		task := fmt.Sprintf("task%d", i+1)
		b.WriteString(serviceTask(task, typ, retries))
		b.WriteString(flow("f"+task, prev, task))
		prev = task
	}
	b.WriteString(`<bpmn:endEvent id="end"/>`)
	b.WriteString(flow("fend", prev, "end"))
	b.WriteString("</bpmn:process></bpmn:definitions>")
	return []byte(b.String())
}

// scrape returns the value of one series from /metrics, summed over the
// series whose labels contain every given label pair.
func scrape(t testing.TB, s *Sim, name string, labels ...string) float64 {
	t.Helper()
	return metricValue(scrapeAll(t, s), name, labels...)
}

// scrapeAll reads /metrics once, so values read from it are consistent.
func scrapeAll(t testing.TB, s *Sim) string {
	t.Helper()
	resp, err := http.Get("http://" + s.MetricsAddr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}

// metricValue sums the series of one metric in a scrape whose labels
// contain every given label pair.
func metricValue(body, name string, labels ...string) float64 {
	var sum float64
	for _, line := range strings.Split(body, "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		ok := true
		for _, l := range labels {
			if !strings.Contains(line, l) {
				ok = false
			}
		}
		if !ok {
			continue
		}
		var v float64
		fields := strings.Fields(line)
		fmt.Sscan(fields[len(fields)-1], &v)
		sum += v
	}
	return sum
}

// onPartitions runs fn on every partition's processing goroutine and
// collects what it returns; tests use it to read what Zeebe exposes only
// through Operate (incidents).
func onPartitions[T any](t testing.TB, s *Sim, fn func(p *partition) []T) []T {
	t.Helper()
	var out []T
	for _, p := range s.cluster.partitions {
		got, err := execOn(context.Background(), p, classInternal, func() ([]T, error) { return fn(p), nil })
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, got...)
	}
	return out
}

func incidentKeys(t testing.TB, s *Sim) []int64 {
	t.Helper()
	list, err := s.Incidents(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var keys []int64
	for _, i := range list {
		keys = append(keys, i.Key)
	}
	return keys
}

func activeInstances(t testing.TB, s *Sim) int {
	return len(onPartitions(t, s, func(p *partition) []int64 {
		var keys []int64
		for k := range p.state.instances {
			keys = append(keys, k)
		}
		return keys
	}))
}

func grpcCode(err error) codes.Code { return status.Code(err) }

// dial is a raw gRPC connection, for requests the Zeebe client would
// refuse to build.
func dial(t testing.TB, s *Sim) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(s.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}
