package restgateway

import (
	"context"
	"net/http"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	pb "github.com/shardctl/shardctl/internal/gatewaypb"
)

type activateJobs struct {
	Type              *string  `json:"type"`
	Worker            string   `json:"worker"`
	Timeout           *int64   `json:"timeout"`
	MaxJobsToActivate *int32   `json:"maxJobsToActivate"`
	FetchVariable     []string `json:"fetchVariable"`
	RequestTimeout    int64    `json:"requestTimeout"`
	TenantIDs         []string `json:"tenantIds"`
}

type activatedJob struct {
	Type                     string    `json:"type"`
	ProcessDefinitionID      string    `json:"processDefinitionId"`
	ProcessDefinitionVersion int32     `json:"processDefinitionVersion"`
	ElementID                string    `json:"elementId"`
	CustomHeaders            Object    `json:"customHeaders"`
	Worker                   string    `json:"worker"`
	Retries                  int32     `json:"retries"`
	Deadline                 int64     `json:"deadline"`
	Variables                Object    `json:"variables"`
	TenantID                 string    `json:"tenantId"`
	JobKey                   Key       `json:"jobKey"`
	ProcessInstanceKey       Key       `json:"processInstanceKey"`
	ProcessDefinitionKey     Key       `json:"processDefinitionKey"`
	ElementInstanceKey       Key       `json:"elementInstanceKey"`
	Kind                     string    `json:"kind"`
	ListenerEventType        string    `json:"listenerEventType"`
	UserTask                 *struct{} `json:"userTask"`
	Tags                     []string  `json:"tags"`
	RootProcessInstanceKey   *Key      `json:"rootProcessInstanceKey"`
}

type activationResult struct {
	Jobs []activatedJob `json:"jobs"`
}

// collected is the gateway's job stream of one REST activation: the
// batches it sends are gathered into one answer, as Camunda's REST
// gateway answers a long poll with one body.
type collected struct {
	grpc.ServerStream
	ctx  context.Context
	jobs []*pb.ActivatedJob
}

func (c *collected) Context() context.Context { return c.ctx }

// Send refuses a batch once the client has gone: the gateway then hands
// it back itself, as it does for a gRPC worker whose stream broke.
func (c *collected) Send(r *pb.ActivateJobsResponse) error {
	if err := c.ctx.Err(); err != nil {
		return status.FromContextError(err).Err()
	}
	c.jobs = append(c.jobs, r.GetJobs()...)
	return nil
}

// clientGone asks a server that can tell at once (internal/http1) whether
// the client closed its connection; net/http's says so through the
// request's context instead.
func clientGone(w http.ResponseWriter) bool {
	g, ok := w.(interface{ ClientGone() bool })
	return ok && g.ClientGone()
}

// JobReturner is a gateway that gives activated jobs back itself (the
// proxy: to the shard each came from, counted). Any other gateway gets
// them back as a failure that keeps their retries and has no backoff,
// which makes a job activatable again at once without using a retry.
type JobReturner interface {
	ReturnJobs(jobs []*pb.ActivatedJob, reason string)
}

// handBackTimeout bounds giving back one job to a gateway that is not a
// JobReturner.
const handBackTimeout = 10 * time.Second

func (f *front) handBack(ctx context.Context, jobs []*pb.ActivatedJob, reason string) {
	if r, ok := f.gw.(JobReturner); ok {
		r.ReturnJobs(jobs, reason)
		return
	}
	for _, j := range jobs {
		c, cancel := context.WithTimeout(context.WithoutCancel(ctx), handBackTimeout)
		_, err := f.gw.FailJob(c, &pb.FailJobRequest{JobKey: j.GetKey(), Retries: j.GetRetries(), ErrorMessage: "handed back: " + reason})
		cancel()
		if err != nil {
			f.opts.Logger.Warn("could not hand back an activated job", "job", j.GetKey(), "reason", reason, "err", err)
		}
	}
}

// activateJobs long-polls as the gateway's ActivateJobs does:
// requestTimeout 0 is the gateway's default wait, a negative one none.
func (f *front) activateJobs(w http.ResponseWriter, req *http.Request) error {
	var in activateJobs
	if err := f.decode(req, &in, false); err != nil {
		return err
	}
	var missing []string
	if blank(in.Type) {
		missing = append(missing, "No type provided")
	}
	if in.Timeout == nil {
		missing = append(missing, "No timeout provided")
	} else if *in.Timeout < 1 {
		missing = append(missing, "The value for timeout is '"+itoa(*in.Timeout)+"' but must be greater than 0")
	}
	if in.MaxJobsToActivate == nil {
		missing = append(missing, "No maxJobsToActivate provided")
	} else if *in.MaxJobsToActivate < 1 {
		missing = append(missing, "The value for maxJobsToActivate is '"+itoa(int64(*in.MaxJobsToActivate))+"' but must be greater than 0")
	}
	if len(missing) > 0 {
		return invalidArgument("%s.", strings.Join(missing, ". "))
	}
	stream := &collected{ctx: req.Context()}
	err := f.gw.ActivateJobs(&pb.ActivateJobsRequest{Type: *in.Type, Worker: in.Worker, Timeout: *in.Timeout,
		MaxJobsToActivate: *in.MaxJobsToActivate, FetchVariable: in.FetchVariable, RequestTimeout: in.RequestTimeout, TenantIds: in.TenantIDs}, stream)
	if err != nil && len(stream.jobs) == 0 {
		return err
	}
	// A client gone while the poll ran cannot receive its jobs: left
	// alone they would stay locked until their timeout.
	if err := req.Context().Err(); err != nil || len(stream.jobs) > 0 && clientGone(w) {
		f.handBack(req.Context(), stream.jobs, "worker gone")
		if err == nil {
			err = context.Canceled
		}
		return status.FromContextError(err).Err()
	}
	// Jobs already activated are answered even if the poll then failed:
	// dropping them would leave them locked until their timeout.
	out := activationResult{Jobs: make([]activatedJob, 0, len(stream.jobs))}
	for _, j := range stream.jobs {
		out.Jobs = append(out.Jobs, activatedJob{Type: j.GetType(), ProcessDefinitionID: j.GetBpmnProcessId(),
			ProcessDefinitionVersion: j.GetProcessDefinitionVersion(), ElementID: j.GetElementId(), CustomHeaders: object(j.GetCustomHeaders()),
			Worker: j.GetWorker(), Retries: j.GetRetries(), Deadline: j.GetDeadline(), Variables: object(j.GetVariables()),
			TenantID: j.GetTenantId(), JobKey: Key(j.GetKey()), ProcessInstanceKey: Key(j.GetProcessInstanceKey()),
			ProcessDefinitionKey: Key(j.GetProcessDefinitionKey()), ElementInstanceKey: Key(j.GetElementInstanceKey()),
			Kind: "BPMN_ELEMENT", ListenerEventType: "UNSPECIFIED", Tags: []string{}})
	}
	return writeJSON(w, out)
}
