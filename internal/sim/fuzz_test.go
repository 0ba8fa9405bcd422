package sim

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/shardctl/shardctl/internal/budget"
	pb "github.com/shardctl/shardctl/internal/gatewaypb"
)

// nullStream discards what a streaming RPC sends.
type nullStream[T any] struct {
	grpc.ServerStream
	ctx context.Context
}

func (n nullStream[T]) Context() context.Context { return n.ctx }
func (n nullStream[T]) Send(T) error             { return nil }

func FuzzGatewayRequests(f *testing.F) {
	f.Add("p", int64(1<<51+5), `{"amount": 500, "orderId": "o-1"}`, "paid", "o-1", int32(1), int32(5), int64(1000), int64(-1), []byte(nil))
	f.Add("route", int64(2<<51+3), `{"amount": "x"}`, "", "", int32(0), int32(0), int64(-5), int64(0), []byte("<definitions"))
	f.Add("timer", int64(1<<51+1), `{}`, "a", "", int32(0), int32(1), int64(1), int64(0), []byte(nil))
	f.Add("", int64(-1), `[`, "audit", "\xff\xfe", int32(-3), int32(1<<30), int64(1<<62), int64(10), linearProcess("q", 2, "b"))
	// One simulator for every input (closed when they are done): what is
	// checked is that no request, alone or after others, panics it or
	// wedges a partition.
	s := startSim(f, Config{Partitions: 2, TimerInterval: 10 * time.Millisecond})
	_, _ = s.gw.DeployResource(context.Background(), &pb.DeployResourceRequest{Resources: []*pb.Resource{
		{Name: "p.bpmn", Content: linearProcess("p", 1, "a")},
		{Name: "wait.bpmn", Content: []byte(catchProcess)},
		{Name: "route.bpmn", Content: []byte(gatewayProcess)},
		{Name: "reserve.bpmn", Content: []byte(errorProcess)},
		{Name: "timer.bpmn", Content: timerProcess("timer", "PT0.05S")},
	}})
	f.Fuzz(func(t *testing.T, id string, key int64, vars, name, corr string, retries, max int32, timeout, reqTimeout int64, xml []byte) {
		ctx, cancel := context.WithTimeout(context.Background(), budget.Of(2*time.Second))
		defer cancel()
		gw := s.gw
		if len(xml) > 0 {
			_, _ = gw.DeployResource(ctx, &pb.DeployResourceRequest{Resources: []*pb.Resource{{Name: id + ".bpmn", Content: xml}}})
		}
		_, _ = gw.CreateProcessInstance(ctx, &pb.CreateProcessInstanceRequest{BpmnProcessId: id, Version: retries, Variables: vars, ProcessDefinitionKey: key})
		_, _ = gw.CreateProcessInstanceWithResult(ctx, &pb.CreateProcessInstanceWithResultRequest{
			Request: &pb.CreateProcessInstanceRequest{BpmnProcessId: id, Version: -1, Variables: vars}, RequestTimeout: 1, FetchVariables: []string{name},
		})
		_ = gw.ActivateJobs(&pb.ActivateJobsRequest{Type: name, MaxJobsToActivate: max, Timeout: timeout, RequestTimeout: -1, FetchVariable: []string{corr}}, nullStream[*pb.ActivateJobsResponse]{ctx: ctx})
		_, _ = gw.CompleteJob(ctx, &pb.CompleteJobRequest{JobKey: key, Variables: vars})
		_, _ = gw.FailJob(ctx, &pb.FailJobRequest{JobKey: key, Retries: retries, RetryBackOff: timeout, Variables: vars})
		_, _ = gw.ThrowError(ctx, &pb.ThrowErrorRequest{JobKey: key, ErrorCode: name, Variables: vars})
		_, _ = gw.UpdateJobRetries(ctx, &pb.UpdateJobRetriesRequest{JobKey: key, Retries: retries})
		_, _ = gw.UpdateJobTimeout(ctx, &pb.UpdateJobTimeoutRequest{JobKey: key, Timeout: timeout})
		_, _ = gw.SetVariables(ctx, &pb.SetVariablesRequest{ElementInstanceKey: key, Variables: vars})
		_, _ = gw.ResolveIncident(ctx, &pb.ResolveIncidentRequest{IncidentKey: key})
		_, _ = gw.PublishMessage(ctx, &pb.PublishMessageRequest{Name: name, CorrelationKey: corr, TimeToLive: timeout, MessageId: id, Variables: vars})
		_, _ = gw.BroadcastSignal(ctx, &pb.BroadcastSignalRequest{SignalName: name, Variables: vars})
		_, _ = gw.CancelProcessInstance(ctx, &pb.CancelProcessInstanceRequest{ProcessInstanceKey: key})

		// Every partition still answers.
		for _, p := range s.cluster.partitions {
			if _, err := execOn(ctx, p, classInternal, func() (bool, error) { return true, nil }); err != nil {
				t.Fatalf("partition %d does not answer after this input: %v", p.id, err)
			}
		}
	})
}
