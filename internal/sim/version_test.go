package sim

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/shardctl/shardctl/internal/budget"
	pb "github.com/shardctl/shardctl/internal/gatewaypb"
	"github.com/shardctl/shardctl/internal/load"
)

// Each version played answers with what its gateway knows: 8.5 ignores
// tags and business ids (protobuf drops fields it does not know) and has
// no EvaluateConditional; 8.8 keeps tags on the instance and its jobs and
// reports a cluster id; 8.10 adds conditional starts and business ids.
func TestVersionsPlayed(t *testing.T) {
	conditional := []byte(load.DefinitionsHead + `<bpmn:process id="c" isExecutable="true">
<bpmn:startEvent id="when"><bpmn:conditionalEventDefinition><bpmn:condition>= amount &gt; 100</bpmn:condition></bpmn:conditionalEventDefinition></bpmn:startEvent>
<bpmn:endEvent id="e"/><bpmn:sequenceFlow id="f" sourceRef="when" targetRef="e"/></bpmn:process></bpmn:definitions>`)
	for _, tc := range []struct {
		version                      string
		tags, clusterID, conditional bool
		businessID                   bool
	}{
		{"8.5", false, false, false, false},
		{"8.8", true, true, false, false},
		{"8.10", true, true, true, true},
	} {
		t.Run(tc.version, func(t *testing.T) {
			v, err := ParseVersion(tc.version)
			if err != nil {
				t.Fatal(err)
			}
			gw := rawClient(t, startSim(t, Config{Partitions: 2, Version: v}))
			ctx := budget.Context(t, 10*time.Second)
			topo, err := gw.Topology(ctx, &pb.TopologyRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if topo.GatewayVersion != v.Release() || !strings.HasPrefix(topo.GatewayVersion, tc.version+".") || (topo.ClusterId != "") != tc.clusterID {
				t.Errorf("topology: version %q, cluster id %q", topo.GatewayVersion, topo.ClusterId)
			}
			if _, err := gw.DeployResource(ctx, &pb.DeployResourceRequest{Resources: []*pb.Resource{
				{Name: "p.bpmn", Content: load.Process("p", "t")}, {Name: "c.bpmn", Content: conditional}}}); err != nil {
				t.Fatal(err)
			}
			created, err := gw.CreateProcessInstance(ctx, &pb.CreateProcessInstanceRequest{BpmnProcessId: "p", Version: -1,
				Tags: []string{"a", "b"}, BusinessId: proto.String("order-1")})
			if err != nil {
				t.Fatal(err)
			}
			if (len(created.Tags) == 2) != tc.tags || (created.BusinessId != nil) != tc.businessID {
				t.Errorf("created %v", created)
			}
			jobs := activateRaw(ctx, t, gw, "t")
			if len(jobs) != 1 || (len(jobs[0].Tags) == 2) != tc.tags {
				t.Errorf("jobs %v", jobs)
			}
			started, err := gw.EvaluateConditional(ctx, &pb.EvaluateConditionalRequest{Variables: `{"amount":101}`})
			switch {
			case !tc.conditional && (status.Code(err) != codes.Unimplemented || !strings.Contains(err.Error(), "EvaluateConditional")):
				t.Errorf("EvaluateConditional on %s: %v, want UNIMPLEMENTED naming it", tc.version, err)
			case tc.conditional && (err != nil || len(started.ProcessInstances) != 1):
				t.Errorf("EvaluateConditional: %v, %v", started, err)
			}
		})
	}
}

func activateRaw(ctx context.Context, t *testing.T, gw pb.GatewayClient, typ string) []*pb.ActivatedJob {
	t.Helper()
	stream, err := gw.ActivateJobs(ctx, &pb.ActivateJobsRequest{Type: typ, Worker: "w", Timeout: 60000, MaxJobsToActivate: 10, RequestTimeout: 5000})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	return resp.Jobs
}

// Tags are checked as Camunda checks them; the instance is not created.
func TestTagsRefused(t *testing.T) {
	s := startSim(t, Config{Partitions: 1})
	gw := rawClient(t, s)
	ctx := budget.Context(t, 10*time.Second)
	if _, err := gw.DeployResource(ctx, &pb.DeployResourceRequest{Resources: []*pb.Resource{{Name: "p.bpmn", Content: load.Process("p")}}}); err != nil {
		t.Fatal(err)
	}
	for name, tags := range map[string][]string{
		"eleven":            {"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k"},
		"starts with digit": {"1a"},
		"space":             {"a b"},
		"too long":          {"a" + strings.Repeat("x", 100)},
		"empty":             {""},
	} {
		_, err := gw.CreateProcessInstance(ctx, &pb.CreateProcessInstanceRequest{BpmnProcessId: "p", Version: -1, Tags: tags})
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v, want INVALID_ARGUMENT", name, err)
		}
	}
	if n := len(onPartitions(t, s, func(p *partition) []int64 { return slices.Collect(maps.Keys(p.state.instances)) })); n != 0 {
		t.Errorf("%d instances created", n)
	}
}

// rawClient is a client of the gateway API as 8.10 defines it (the Go
// client knows 8.5's).
func rawClient(t testing.TB, s *Sim) pb.GatewayClient { return pb.NewGatewayClient(dial(t, s)) }

// Each version exports its own generation of Zeebe's metric names: 8.5's
// Prometheus client, or Micrometer's (latency and processing timers in
// _seconds, the pending-incidents gauge without _total, flow control),
// with 8.10's physical tenant on partition metrics.
func TestMetricNamesPlayed(t *testing.T) {
	for _, tc := range []struct {
		version     string
		present     []string
		absent      []string
		tenantLabel bool
	}{
		{"8.5", []string{"zeebe_stream_processor_latency_bucket", "zeebe_stream_processor_processing_duration_count", "zeebe_pending_incidents_total"},
			[]string{"zeebe_stream_processor_latency_seconds_bucket", "zeebe_pending_incidents{", "zeebe_flow_control_total"}, false},
		{"8.8", []string{"zeebe_stream_processor_latency_seconds_bucket", "zeebe_stream_processor_processing_duration_seconds_count", "zeebe_pending_incidents{",
			`zeebe_flow_control_total{context="userCommand",outcome="accepted"`, "zeebe_flow_control_write_rate_limit"},
			[]string{"zeebe_stream_processor_latency_bucket", "zeebe_pending_incidents_total"}, false},
		{"8.10", []string{"zeebe_stream_processor_latency_seconds_bucket", `physicalTenantId="default"`}, []string{"zeebe_pending_incidents_total"}, true},
	} {
		t.Run(tc.version, func(t *testing.T) {
			v, err := ParseVersion(tc.version)
			if err != nil {
				t.Fatal(err)
			}
			s := startSim(t, Config{Partitions: 1, Version: v})
			gw := rawClient(t, s)
			ctx := budget.Context(t, 10*time.Second)
			if _, err := gw.DeployResource(ctx, &pb.DeployResourceRequest{Resources: []*pb.Resource{{Name: "p.bpmn", Content: load.Process("p")}}}); err != nil {
				t.Fatal(err)
			}
			if _, err := gw.CreateProcessInstance(ctx, &pb.CreateProcessInstanceRequest{BpmnProcessId: "p", Version: -1}); err != nil {
				t.Fatal(err)
			}
			page := scrapeAll(t, s)
			for _, want := range tc.present {
				if !strings.Contains(page, want) {
					t.Errorf("no %s in the metrics of %s", want, tc.version)
				}
			}
			for _, not := range tc.absent {
				if strings.Contains(page, not) {
					t.Errorf("%s in the metrics of %s", not, tc.version)
				}
			}
			if got := strings.Contains(page, `zeebe_log_appender_last_committed_position{partition="1",physicalTenantId="default"}`); got != tc.tenantLabel {
				t.Errorf("partition metrics labelled with the physical tenant: %v, want %v", got, tc.tenantLabel)
			}
		})
	}
}

// Flow control's write-rate limit (8.6+): client commands past it are
// refused with RESOURCE_EXHAUSTED and counted both as dropped requests
// and as writeRateLimitExhausted, as Zeebe's log stream counts them; the
// gauges report the limit; the records processing writes use it up.
func TestWriteRateLimitRefuses(t *testing.T) {
	s := startSim(t, Config{Partitions: 1, WriteRateLimit: 20, BacklogLimit: -1})
	gw := rawClient(t, s)
	ctx := budget.Context(t, 20*time.Second)
	if _, err := gw.DeployResource(ctx, &pb.DeployResourceRequest{Resources: []*pb.Resource{{Name: "p.bpmn", Content: load.Process("p")}}}); err != nil {
		t.Fatal(err)
	}
	accepted, refused := 0, 0
	for range 100 {
		_, err := gw.CreateProcessInstance(ctx, &pb.CreateProcessInstanceRequest{BpmnProcessId: "p", Version: -1})
		switch grpcCode(err) {
		case codes.OK:
			accepted++
		case codes.ResourceExhausted:
			refused++
		default:
			t.Fatalf("create: %v", err)
		}
	}
	// A second's burst of 20 records, each instance writing several: far
	// fewer than 100 pass within the time 100 calls take.
	if refused == 0 || accepted == 0 || accepted > 60 {
		t.Errorf("accepted %d, refused %d of 100 at 20 records/s", accepted, refused)
	}
	throttled := scrape(t, s, "zeebe_flow_control_total", "context", "userCommand", "outcome", "writeRateLimitExhausted")
	dropped := scrape(t, s, "zeebe_dropped_request_count_total")
	if throttled != float64(refused) || dropped != float64(refused) {
		t.Errorf("metrics: %v refused at the write rate, %v dropped; the client saw %d refusals", throttled, dropped, refused)
	}
	if limit := scrape(t, s, "zeebe_flow_control_write_rate_limit"); limit != 20 {
		t.Errorf("write-rate limit gauge %v, want 20", limit)
	}
	v85, _ := ParseVersion("8.5")
	if _, err := New(Config{Listen: "127.0.0.1:0", Version: v85, WriteRateLimit: 20}); err == nil || !strings.Contains(err.Error(), "8.8 or later") {
		t.Errorf("a write-rate limit on 8.5: %v, want refused", err)
	}
}
