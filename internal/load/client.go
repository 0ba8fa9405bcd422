package load

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/camunda/zeebe/clients/go/v8/pkg/entities"
	"github.com/camunda/zeebe/clients/go/v8/pkg/worker"
	"github.com/camunda/zeebe/clients/go/v8/pkg/zbc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Client is how a load reaches a cluster: the Zeebe gateway API over
// gRPC (GRPC) or Camunda 8.8's REST API (REST). The load's clock, counts
// and stages are the same whichever it speaks.
type Client interface {
	// Deploy deploys one BPMN resource.
	Deploy(ctx context.Context, name string, bpmn []byte) error
	// Create starts an instance of the latest version of processID and
	// returns its key; a refusal for backpressure wraps ErrRefused.
	Create(ctx context.Context, processID string) (int64, error)
	// Work completes every job of w.JobType until ctx ends, with
	// w.Concurrency jobs at a time, calling done with the instance of
	// each job it completed; it returns once its workers have stopped.
	Work(ctx context.Context, w Worker, done func(instanceKey int64))
}

// Worker is one job type's workers.
type Worker struct {
	JobType     string
	Concurrency int
	// Stream takes jobs pushed on a stream (gRPC, Zeebe 8.4+); REST
	// polls, as the REST API has no stream.
	Stream bool
	// Timeout bounds one completion.
	Timeout time.Duration
}

// ErrRefused is a creation the cluster refused for backpressure
// (RESOURCE_EXHAUSTED, HTTP 503 of that title).
var ErrRefused = errors.New("refused for backpressure")

// GRPC is a Client over the Zeebe Go client.
func GRPC(c zbc.Client) Client { return grpcClient{c} }

type grpcClient struct{ c zbc.Client }

func (g grpcClient) Deploy(ctx context.Context, name string, bpmn []byte) error {
	_, err := g.c.NewDeployResourceCommand().AddResource(bpmn, name).Send(ctx)
	return err
}

func (g grpcClient) Create(ctx context.Context, processID string) (int64, error) {
	resp, err := g.c.NewCreateInstanceCommand().BPMNProcessId(processID).LatestVersion().Send(ctx)
	if status.Code(err) == codes.ResourceExhausted {
		return 0, errors.Join(ErrRefused, err)
	}
	return resp.GetProcessInstanceKey(), err
}

func (g grpcClient) Work(ctx context.Context, w Worker, done func(int64)) {
	jw := g.c.NewJobWorker().JobType(w.JobType).Handler(func(jc worker.JobClient, job entities.Job) {
		cctx, cancel := context.WithTimeout(ctx, w.Timeout)
		defer cancel()
		if _, err := jc.NewCompleteJobCommand().JobKey(job.Key).Send(cctx); err == nil {
			done(job.ProcessInstanceKey)
		}
	}).MaxJobsActive(512).Concurrency(w.Concurrency).PollInterval(20 * time.Millisecond).RequestTimeout(2 * time.Second).BackoffSupplier(Backoff()).
		StreamEnabled(w.Stream).Open()
	<-ctx.Done()
	jw.Close()
}

// workAll runs every job type's workers until ctx ends; the returned
// function waits for them.
func workAll(ctx context.Context, c Client, workers []Worker, done func(w Worker, instanceKey int64)) (wait func()) {
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Go(func() { c.Work(ctx, w, func(k int64) { done(w, k) }) })
	}
	return wg.Wait
}
