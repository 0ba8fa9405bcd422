package restfront

import (
	"context"
	"net/http"
	"strings"

	pb "github.com/camunda/zeebe/clients/go/v8/pkg/pb"
	"google.golang.org/grpc"
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
	Type                     string         `json:"type"`
	ProcessDefinitionID      string         `json:"processDefinitionId"`
	ProcessDefinitionVersion int32          `json:"processDefinitionVersion"`
	ElementID                string         `json:"elementId"`
	CustomHeaders            map[string]any `json:"customHeaders"`
	Worker                   string         `json:"worker"`
	Retries                  int32          `json:"retries"`
	Deadline                 int64          `json:"deadline"`
	Variables                map[string]any `json:"variables"`
	TenantID                 string         `json:"tenantId"`
	JobKey                   Key            `json:"jobKey"`
	ProcessInstanceKey       Key            `json:"processInstanceKey"`
	ProcessDefinitionKey     Key            `json:"processDefinitionKey"`
	ElementInstanceKey       Key            `json:"elementInstanceKey"`
	Kind                     string         `json:"kind"`
	ListenerEventType        string         `json:"listenerEventType"`
	UserTask                 *struct{}      `json:"userTask"`
	Tags                     []string       `json:"tags"`
	RootProcessInstanceKey   *Key           `json:"rootProcessInstanceKey"`
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

func (c *collected) Send(r *pb.ActivateJobsResponse) error {
	c.jobs = append(c.jobs, r.GetJobs()...)
	return nil
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
