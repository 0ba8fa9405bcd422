package restgateway

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/shardctl/shardctl/internal/gatewaypb"
	"github.com/shardctl/shardctl/internal/jsonscan"
)

type brokerInfo struct {
	NodeID     int32           `json:"nodeId"`
	Host       string          `json:"host"`
	Port       int32           `json:"port"`
	Partitions []partitionInfo `json:"partitions"`
	Version    string          `json:"version"`
}

type partitionInfo struct {
	PartitionID int32  `json:"partitionId"`
	Role        string `json:"role"`
	Health      string `json:"health"`
}

type topologyResult struct {
	Brokers []brokerInfo `json:"brokers"`
	// ClusterID is 8.9's; null where the cluster has none to give.
	ClusterID             *string `json:"clusterId"`
	ClusterSize           int32   `json:"clusterSize"`
	PartitionsCount       int32   `json:"partitionsCount"`
	ReplicationFactor     int32   `json:"replicationFactor"`
	GatewayVersion        string  `json:"gatewayVersion"`
	LastCompletedChangeID string  `json:"lastCompletedChangeId"`
}

func (f *front) topology(w http.ResponseWriter, req *http.Request) error {
	t, err := f.gw.Topology(req.Context(), &pb.TopologyRequest{})
	if err != nil {
		return err
	}
	out := topologyResult{ClusterSize: t.GetClusterSize(), PartitionsCount: t.GetPartitionsCount(),
		ReplicationFactor: t.GetReplicationFactor(), GatewayVersion: t.GetGatewayVersion(), LastCompletedChangeID: "-1", Brokers: []brokerInfo{}}
	for _, b := range t.GetBrokers() {
		bi := brokerInfo{NodeID: b.GetNodeId(), Host: b.GetHost(), Port: b.GetPort(), Version: b.GetVersion(), Partitions: []partitionInfo{}}
		for _, p := range b.GetPartitions() {
			bi.Partitions = append(bi.Partitions, partitionInfo{PartitionID: p.GetPartitionId(),
				Role: strings.ToLower(p.GetRole().String()), Health: strings.ToLower(p.GetHealth().String())})
		}
		out.Brokers = append(out.Brokers, bi)
	}
	return writeJSON(w, out)
}

// status is 204 while a partition has a healthy leader, else 503, with no
// body either way.
func (f *front) status(w http.ResponseWriter, req *http.Request) error {
	t, err := f.gw.Topology(req.Context(), &pb.TopologyRequest{})
	if err == nil {
		for _, b := range t.GetBrokers() {
			for _, p := range b.GetPartitions() {
				if p.GetRole() == pb.Partition_LEADER && p.GetHealth() == pb.Partition_HEALTHY {
					w.WriteHeader(http.StatusNoContent)
					return nil
				}
			}
		}
	}
	w.WriteHeader(http.StatusServiceUnavailable)
	return nil
}

type processDeployment struct {
	ProcessDefinitionID      string `json:"processDefinitionId"`
	ProcessDefinitionVersion int32  `json:"processDefinitionVersion"`
	ResourceName             string `json:"resourceName"`
	TenantID                 string `json:"tenantId"`
	ProcessDefinitionKey     Key    `json:"processDefinitionKey"`
}

// deploymentItem has one kind of resource; the others are null, as the
// 8.9 schema (and its SDK's validation) wants every key present.
type deploymentItem struct {
	ProcessDefinition    *processDeployment `json:"processDefinition"`
	DecisionDefinition   *struct{}          `json:"decisionDefinition"`
	DecisionRequirements *struct{}          `json:"decisionRequirements"`
	Form                 *struct{}          `json:"form"`
	Resource             *struct{}          `json:"resource"`
}

type deploymentResult struct {
	TenantID      string           `json:"tenantId"`
	DeploymentKey Key              `json:"deploymentKey"`
	Deployments   []deploymentItem `json:"deployments"`
}

// deploy takes multipart/form-data: one part named resources per file
// (its filename names the resource) and an optional tenantId.
func (f *front) deploy(w http.ResponseWriter, req *http.Request) error {
	ct := req.Header.Get("Content-Type")
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil || mt != "multipart/form-data" || params["boundary"] == "" {
		return unsupported(ct)
	}
	mr := multipart.NewReader(http.MaxBytesReader(nil, req.Body, f.opts.MaxBody), params["boundary"])
	dr := &pb.DeployResourceRequest{}
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return tooLargeOr(err, f.opts.MaxBody, "Failed to parse multipart request")
		}
		b, err := io.ReadAll(part)
		if err != nil {
			return tooLargeOr(err, f.opts.MaxBody, "Failed to parse multipart request")
		}
		switch part.FormName() {
		case "resources":
			dr.Resources = append(dr.Resources, &pb.Resource{Name: part.FileName(), Content: b})
		case "tenantId":
			dr.TenantId = string(b)
		}
	}
	if len(dr.Resources) == 0 {
		return badRequest("Required part 'resources' is not present.")
	}
	resp, err := f.gw.DeployResource(req.Context(), dr)
	if err != nil {
		return err
	}
	out := deploymentResult{TenantID: resp.GetTenantId(), DeploymentKey: Key(resp.GetKey()), Deployments: []deploymentItem{}}
	for _, d := range resp.GetDeployments() {
		if p := d.GetProcess(); p != nil {
			out.Deployments = append(out.Deployments, deploymentItem{ProcessDefinition: &processDeployment{
				ProcessDefinitionID: p.GetBpmnProcessId(), ProcessDefinitionVersion: p.GetVersion(), ResourceName: p.GetResourceName(),
				TenantID: p.GetTenantId(), ProcessDefinitionKey: Key(p.GetProcessDefinitionKey())}})
		}
	}
	return writeJSON(w, out)
}

type startInstruction struct {
	ElementID string `json:"elementId"`
}

type createInstance struct {
	ProcessDefinitionID      *string            `json:"processDefinitionId"`
	ProcessDefinitionVersion *int32             `json:"processDefinitionVersion"`
	ProcessDefinitionKey     *Key               `json:"processDefinitionKey"`
	Variables                Object             `json:"variables"`
	TenantID                 string             `json:"tenantId"`
	OperationReference       *int64             `json:"operationReference"`
	StartInstructions        []startInstruction `json:"startInstructions"`
	AwaitCompletion          bool               `json:"awaitCompletion"`
	FetchVariables           []string           `json:"fetchVariables"`
	RequestTimeout           int64              `json:"requestTimeout"`
	Tags                     []string           `json:"tags"`
	BusinessID               *string            `json:"businessId"`
}

type createdInstance struct {
	ProcessDefinitionID      string   `json:"processDefinitionId"`
	ProcessDefinitionKey     Key      `json:"processDefinitionKey"`
	ProcessDefinitionVersion int32    `json:"processDefinitionVersion"`
	TenantID                 string   `json:"tenantId"`
	Variables                Object   `json:"variables"`
	ProcessInstanceKey       Key      `json:"processInstanceKey"`
	Tags                     []string `json:"tags"`
	BusinessID               *string  `json:"businessId"`
}

func (f *front) createInstance(w http.ResponseWriter, req *http.Request) error {
	body, err := f.body(req, false)
	if err != nil {
		return err
	}
	var in createInstance
	if !decodeCreate(body, &in) {
		in = createInstance{}
		if err := unmarshal(body, &in); err != nil {
			return err
		}
	}
	switch {
	case in.ProcessDefinitionID == nil && in.ProcessDefinitionKey == nil:
		return invalidArgument("At least one of [processDefinitionId, processDefinitionKey] is required.")
	case in.ProcessDefinitionID != nil && in.ProcessDefinitionKey != nil:
		return invalidArgument("Only one of [processDefinitionId, processDefinitionKey] is allowed.")
	}
	if err := checkOperationReference(in.OperationReference); err != nil {
		return err
	}
	vars := document(in.Variables)
	cr := &pb.CreateProcessInstanceRequest{Variables: vars, TenantId: in.TenantID, Version: -1, Tags: in.Tags, BusinessId: in.BusinessID}
	if in.OperationReference != nil {
		ref := uint64(*in.OperationReference)
		cr.OperationReference = &ref
	}
	if in.ProcessDefinitionID != nil {
		cr.BpmnProcessId = *in.ProcessDefinitionID
		if in.ProcessDefinitionVersion != nil {
			cr.Version = *in.ProcessDefinitionVersion
		}
	} else {
		cr.ProcessDefinitionKey = int64(*in.ProcessDefinitionKey)
	}
	for _, s := range in.StartInstructions {
		cr.StartInstructions = append(cr.StartInstructions, &pb.ProcessInstanceCreationStartInstruction{ElementId: s.ElementID})
	}
	if !in.AwaitCompletion {
		c, err := f.create(req.Context(), cr)
		if err != nil {
			return err
		}
		writeBody(w, c.appendJSON(make([]byte, 0, 320)))
		return nil
	}
	resp, err := f.gw.CreateProcessInstanceWithResult(req.Context(), &pb.CreateProcessInstanceWithResultRequest{
		Request: cr, RequestTimeout: in.RequestTimeout, FetchVariables: in.FetchVariables})
	if err != nil {
		return err
	}
	return writeJSON(w, createdInstance{ProcessDefinitionID: resp.GetBpmnProcessId(), ProcessDefinitionKey: Key(resp.GetProcessDefinitionKey()),
		ProcessDefinitionVersion: resp.GetVersion(), TenantID: resp.GetTenantId(), ProcessInstanceKey: Key(resp.GetProcessInstanceKey()),
		Variables: object(resp.GetVariables()), Tags: tags(resp.GetTags()), BusinessID: resp.BusinessId})
}

// create starts an instance, through Options.Unary when set.
func (f *front) create(ctx context.Context, cr *pb.CreateProcessInstanceRequest) (createdInstance, error) {
	if f.opts.Unary == nil {
		resp, err := f.gw.CreateProcessInstance(ctx, cr)
		if err != nil {
			return createdInstance{}, err
		}
		return createdInstance{ProcessDefinitionID: resp.GetBpmnProcessId(), ProcessDefinitionKey: Key(resp.GetProcessDefinitionKey()),
			ProcessDefinitionVersion: resp.GetVersion(), TenantID: resp.GetTenantId(), ProcessInstanceKey: Key(resp.GetProcessInstanceKey()),
			Tags: resp.GetTags(), BusinessID: resp.BusinessId}, nil
	}
	auth, tenant := CallMetadata(ctx)
	out, err := f.opts.Unary(ctx, "CreateProcessInstance", appendCreateRequest(make([]byte, 0, 64+len(cr.Variables)), cr), auth, tenant)
	if err != nil {
		return createdInstance{}, err
	}
	c, err := readCreated(out)
	if err != nil {
		return c, status.Errorf(codes.Internal, "the gateway's answer does not parse: %v", err)
	}
	return c, nil
}

// appendJSON writes the answer as encoding/json would (HTML characters
// as they are), by hand: it is the answer of the REST front's hottest
// call, and reflection cost a tenth of the call there.
func (c createdInstance) appendJSON(b []byte) []byte {
	b = append(b, `{"processDefinitionId":`...)
	b = jsonscan.AppendString(b, c.ProcessDefinitionID)
	b = append(b, `,"processDefinitionKey":"`...)
	b = strconv.AppendInt(b, int64(c.ProcessDefinitionKey), 10)
	b = append(b, `","processDefinitionVersion":`...)
	b = strconv.AppendInt(b, int64(c.ProcessDefinitionVersion), 10)
	b = append(b, `,"tenantId":`...)
	b = jsonscan.AppendString(b, c.TenantID)
	b = append(b, `,"variables":`...)
	if len(c.Variables) == 0 {
		b = append(b, "{}"...)
	} else {
		b = append(b, c.Variables...)
	}
	b = append(b, `,"processInstanceKey":"`...)
	b = strconv.AppendInt(b, int64(c.ProcessInstanceKey), 10)
	b = append(b, `","tags":[`...)
	for i, t := range c.Tags {
		if i > 0 {
			b = append(b, ',')
		}
		b = jsonscan.AppendString(b, t)
	}
	b = append(b, `],"businessId":`...)
	if c.BusinessID == nil {
		b = append(b, "null"...)
	} else {
		b = jsonscan.AppendString(b, *c.BusinessID)
	}
	return append(b, '}')
}

// tags are the instance's tags as created: the engine keeps none, so they
// are the request's, or [].
func tags(t []string) []string {
	if t == nil {
		return []string{}
	}
	return t
}

func checkOperationReference(ref *int64) error {
	if ref != nil && *ref < 1 {
		return invalidArgument("The value for operationReference is '%d' but must be > 0", *ref)
	}
	return nil
}

// operation is the optional body of a command on a key.
type operation struct {
	OperationReference *int64 `json:"operationReference"`
}

// onKey serves a command on the key in the path whose body holds at most
// an operationReference, answered with 204: cancellation, incident
// resolution, resource deletion.
func (f *front) onKey(param string, command func(ctx context.Context, key int64) error) func(http.ResponseWriter, *http.Request) error {
	return func(w http.ResponseWriter, req *http.Request) error {
		key, err := pathKey(req, param)
		if err != nil {
			return err
		}
		var op operation
		if err := f.decode(req, &op, true); err != nil {
			return err
		}
		if err := checkOperationReference(op.OperationReference); err != nil {
			return err
		}
		if err := command(req.Context(), key); err != nil {
			return err
		}
		return noContent(w)
	}
}

func (f *front) cancelInstance(ctx context.Context, key int64) error {
	_, err := f.gw.CancelProcessInstance(ctx, &pb.CancelProcessInstanceRequest{ProcessInstanceKey: key})
	return err
}

func (f *front) resolveIncident(ctx context.Context, key int64) error {
	_, err := f.gw.ResolveIncident(ctx, &pb.ResolveIncidentRequest{IncidentKey: key})
	return err
}

func (f *front) deleteResource(ctx context.Context, key int64) error {
	_, err := f.gw.DeleteResource(ctx, &pb.DeleteResourceRequest{ResourceKey: key})
	return err
}

type completeJob struct {
	Variables Object          `json:"variables"`
	Result    json.RawMessage `json:"result"`
}

func (f *front) completeJob(w http.ResponseWriter, req *http.Request) error {
	key, err := pathKey(req, "jobKey")
	if err != nil {
		return err
	}
	var in completeJob
	if err := f.decode(req, &in, true); err != nil {
		return err
	}
	vars := document(in.Variables)
	if _, err := f.gw.CompleteJob(req.Context(), &pb.CompleteJobRequest{JobKey: key, Variables: vars}); err != nil {
		return err
	}
	return noContent(w)
}

type failJob struct {
	Retries      int32  `json:"retries"`
	ErrorMessage string `json:"errorMessage"`
	RetryBackOff int64  `json:"retryBackOff"`
	Variables    Object `json:"variables"`
}

func (f *front) failJob(w http.ResponseWriter, req *http.Request) error {
	key, err := pathKey(req, "jobKey")
	if err != nil {
		return err
	}
	var in failJob
	if err := f.decode(req, &in, true); err != nil {
		return err
	}
	vars := document(in.Variables)
	if _, err := f.gw.FailJob(req.Context(), &pb.FailJobRequest{JobKey: key, Retries: in.Retries, ErrorMessage: in.ErrorMessage,
		RetryBackOff: in.RetryBackOff, Variables: vars}); err != nil {
		return err
	}
	return noContent(w)
}

type throwError struct {
	ErrorCode    *string `json:"errorCode"`
	ErrorMessage *string `json:"errorMessage"`
	Variables    Object  `json:"variables"`
}

func (f *front) throwError(w http.ResponseWriter, req *http.Request) error {
	key, err := pathKey(req, "jobKey")
	if err != nil {
		return err
	}
	var in throwError
	if err := f.decode(req, &in, false); err != nil {
		return err
	}
	if blank(in.ErrorCode) {
		return invalidArgument("No errorCode provided.")
	}
	vars := document(in.Variables)
	te := &pb.ThrowErrorRequest{JobKey: key, ErrorCode: *in.ErrorCode, Variables: vars}
	if in.ErrorMessage != nil {
		te.ErrorMessage = *in.ErrorMessage
	}
	if _, err := f.gw.ThrowError(req.Context(), te); err != nil {
		return err
	}
	return noContent(w)
}

type updateJob struct {
	Changeset *struct {
		Retries *int32 `json:"retries"`
		Timeout *int64 `json:"timeout"`
	} `json:"changeset"`
	OperationReference *int64 `json:"operationReference"`
}

func (f *front) updateJob(w http.ResponseWriter, req *http.Request) error {
	key, err := pathKey(req, "jobKey")
	if err != nil {
		return err
	}
	var in updateJob
	if err := f.decode(req, &in, false); err != nil {
		return err
	}
	if in.Changeset == nil || (in.Changeset.Retries == nil && in.Changeset.Timeout == nil) {
		return invalidArgument("At least one of [retries, timeout] is required")
	}
	if err := checkOperationReference(in.OperationReference); err != nil {
		return err
	}
	if r := in.Changeset.Retries; r != nil {
		if _, err := f.gw.UpdateJobRetries(req.Context(), &pb.UpdateJobRetriesRequest{JobKey: key, Retries: *r}); err != nil {
			return err
		}
	}
	if t := in.Changeset.Timeout; t != nil {
		if _, err := f.gw.UpdateJobTimeout(req.Context(), &pb.UpdateJobTimeoutRequest{JobKey: key, Timeout: *t}); err != nil {
			return err
		}
	}
	return noContent(w)
}

type publishMessage struct {
	Name           *string `json:"name"`
	CorrelationKey string  `json:"correlationKey"`
	TimeToLive     int64   `json:"timeToLive"`
	MessageID      string  `json:"messageId"`
	Variables      Object  `json:"variables"`
	TenantID       string  `json:"tenantId"`
}

type publishedMessage struct {
	TenantID   string `json:"tenantId"`
	MessageKey Key    `json:"messageKey"`
}

func (f *front) publishMessage(w http.ResponseWriter, req *http.Request) error {
	var in publishMessage
	if err := f.decode(req, &in, false); err != nil {
		return err
	}
	if blank(in.Name) {
		return invalidArgument("No name provided.")
	}
	vars := document(in.Variables)
	resp, err := f.gw.PublishMessage(req.Context(), &pb.PublishMessageRequest{Name: *in.Name, CorrelationKey: in.CorrelationKey,
		TimeToLive: in.TimeToLive, MessageId: in.MessageID, Variables: vars, TenantId: in.TenantID})
	if err != nil {
		return err
	}
	return writeJSON(w, publishedMessage{TenantID: resp.GetTenantId(), MessageKey: Key(resp.GetKey())})
}

type broadcastSignal struct {
	SignalName *string `json:"signalName"`
	Variables  Object  `json:"variables"`
	TenantID   string  `json:"tenantId"`
}

type broadcastResult struct {
	TenantID  string `json:"tenantId"`
	SignalKey Key    `json:"signalKey"`
}

func (f *front) broadcastSignal(w http.ResponseWriter, req *http.Request) error {
	var in broadcastSignal
	if err := f.decode(req, &in, false); err != nil {
		return err
	}
	if blank(in.SignalName) {
		return invalidArgument("No signalName provided.")
	}
	vars := document(in.Variables)
	resp, err := f.gw.BroadcastSignal(req.Context(), &pb.BroadcastSignalRequest{SignalName: *in.SignalName, Variables: vars, TenantId: in.TenantID})
	if err != nil {
		return err
	}
	return writeJSON(w, broadcastResult{TenantID: resp.GetTenantId(), SignalKey: Key(resp.GetKey())})
}

type conditionalEvaluation struct {
	TenantID             string `json:"tenantId"`
	ProcessDefinitionKey *Key   `json:"processDefinitionKey"`
	Variables            Object `json:"variables"`
}

type instanceReference struct {
	ProcessDefinitionKey Key `json:"processDefinitionKey"`
	ProcessInstanceKey   Key `json:"processInstanceKey"`
}

type conditionalResult struct {
	ProcessInstances []instanceReference `json:"processInstances"`
}

// evaluateConditionals (8.9) starts an instance at each root-level
// conditional start event whose condition holds for the variables.
func (f *front) evaluateConditionals(w http.ResponseWriter, req *http.Request) error {
	var in conditionalEvaluation
	if err := f.decode(req, &in, false); err != nil {
		return err
	}
	if in.Variables == nil {
		return invalidArgument("No variables provided.")
	}
	r := &pb.EvaluateConditionalRequest{TenantId: in.TenantID, Variables: document(in.Variables)}
	if in.ProcessDefinitionKey != nil {
		r.ProcessDefinitionKey = int64(*in.ProcessDefinitionKey)
	}
	resp, err := f.gw.EvaluateConditional(req.Context(), r)
	if err != nil {
		return err
	}
	out := conditionalResult{ProcessInstances: make([]instanceReference, 0, len(resp.GetProcessInstances()))}
	for _, p := range resp.GetProcessInstances() {
		out.ProcessInstances = append(out.ProcessInstances, instanceReference{Key(p.GetProcessDefinitionKey()), Key(p.GetProcessInstanceKey())})
	}
	return writeJSON(w, out)
}

type setVariables struct {
	Variables          Object `json:"variables"`
	Local              bool   `json:"local"`
	OperationReference *int64 `json:"operationReference"`
}

func (f *front) setVariables(w http.ResponseWriter, req *http.Request) error {
	key, err := pathKey(req, "elementInstanceKey")
	if err != nil {
		return err
	}
	var in setVariables
	if err := f.decode(req, &in, false); err != nil {
		return err
	}
	if in.Variables == nil {
		return invalidArgument("No variables provided.")
	}
	if err := checkOperationReference(in.OperationReference); err != nil {
		return err
	}
	vars := document(in.Variables)
	if _, err := f.gw.SetVariables(req.Context(), &pb.SetVariablesRequest{ElementInstanceKey: key, Variables: vars, Local: in.Local}); err != nil {
		return err
	}
	return noContent(w)
}

// evaluateDecision is the gateway's to answer; the simulator runs no
// decisions and says so (501).
func (f *front) evaluateDecision(w http.ResponseWriter, req *http.Request) error {
	var in struct {
		DecisionDefinitionID  string `json:"decisionDefinitionId"`
		DecisionDefinitionKey *Key   `json:"decisionDefinitionKey"`
		Variables             Object `json:"variables"`
		TenantID              string `json:"tenantId"`
	}
	if err := f.decode(req, &in, false); err != nil {
		return err
	}
	vars := document(in.Variables)
	er := &pb.EvaluateDecisionRequest{DecisionId: in.DecisionDefinitionID, Variables: vars, TenantId: in.TenantID}
	if in.DecisionDefinitionKey != nil {
		er.DecisionKey = int64(*in.DecisionDefinitionKey)
	}
	resp, err := f.gw.EvaluateDecision(req.Context(), er)
	if err != nil {
		return err
	}
	return writeJSON(w, map[string]any{"decisionDefinitionId": resp.GetDecisionId(), "decisionDefinitionKey": Key(resp.GetDecisionKey())})
}
