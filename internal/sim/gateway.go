package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shardctl/shardctl/internal/bpmn"
	pb "github.com/shardctl/shardctl/internal/gatewaypb"
)

// Defaults of Zeebe's gateway.
const (
	defaultLongPollTimeout = 10 * time.Second
	defaultResultTimeout   = 10 * time.Second
)

// gateway serves the Zeebe gateway API over the simulated cluster.
type gateway struct {
	pb.UnimplementedGatewayServer
	c    *cluster
	addr func() net.Addr
}

func invalid(format string, a ...any) error {
	return status.Errorf(codes.InvalidArgument, format, a...)
}

func notSupported(rpc string) error {
	return status.Errorf(codes.Unimplemented, "%s is not supported by the shardctl shard simulator (it runs the BPMN subset documented in 'shardctl sim serve --help')", rpc)
}

func checkTenant(rpc, tenant string) error {
	if tenant != "" && tenant != defaultTenant {
		return invalid("Expected to handle gRPC request %s with tenant identifier '%s', but multi-tenancy is disabled", rpc, tenant)
	}
	return nil
}

func variables(field, doc string) (map[string]any, error) {
	vars, err := parseVariables(doc)
	if err != nil {
		return nil, invalid("Property '%s' is invalid: Expected document to be a root level object, but was '%s'", field, truncate(doc, 64))
	}
	return vars, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// execOn runs fn on a partition's processing goroutine and waits for its
// answer. A client that gives up gets its context's error; the command is
// still processed (the outcome is unknown to it, as with a real broker).
func execOn[T any](ctx context.Context, p *partition, cl class, fn func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	var zero T
	if err := p.enqueue(cl, func() {
		v, err := fn()
		done <- result{v, err}
	}); err != nil {
		return zero, err
	}
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		return zero, status.FromContextError(ctx.Err()).Err()
	case <-p.cluster.aborted:
		return zero, errShuttingDown()
	}
}

func errShuttingDown() error {
	return status.Error(codes.Unavailable, "the gateway is shutting down: retry against another gateway")
}

// byKey finds the partition a key belongs to.
func (g *gateway) byKey(key int64) (*partition, error) {
	id := PartitionOfKey(key)
	p := g.c.partitionFor(id)
	if p == nil || key <= 0 {
		return nil, status.Errorf(codes.Unavailable, "Expected to execute the command on one of the partitions, but none available: key %d names partition %d, and this cluster has partitions 1 to %d", key, id, len(g.c.partitions))
	}
	return p, nil
}

func (g *gateway) Topology(context.Context, *pb.TopologyRequest) (*pb.TopologyResponse, error) {
	host, port := "127.0.0.1", 0
	if a := g.addr(); a != nil {
		h, ps, err := net.SplitHostPort(a.String())
		if err == nil {
			host = h
			port, _ = strconv.Atoi(ps)
		}
	}
	parts := make([]*pb.Partition, len(g.c.partitions))
	for i, p := range g.c.partitions {
		parts[i] = &pb.Partition{PartitionId: p.id, Role: pb.Partition_LEADER, Health: pb.Partition_HEALTHY}
	}
	v := g.c.cfg.Version
	t := &pb.TopologyResponse{
		Brokers:           []*pb.BrokerInfo{{NodeId: 0, Host: host, Port: int32(port), Partitions: parts, Version: v.Release()}},
		ClusterSize:       1,
		PartitionsCount:   int32(len(g.c.partitions)),
		ReplicationFactor: 1,
		GatewayVersion:    v.Release(),
	}
	if v.clusterID() {
		t.ClusterId = g.c.id
	}
	return t, nil
}

// deploy parses every resource, then versions them on partition 1.
func (g *gateway) deploy(ctx context.Context, resources []*pb.Resource) (int64, []*process, error) {
	if len(resources) == 0 {
		return 0, nil, invalid("Expected to deploy at least one resource, but none given")
	}
	var parsed []parsedResource
	var problems []string
	for _, r := range resources {
		switch ext := strings.ToLower(r.GetName()); {
		case strings.HasSuffix(ext, ".bpmn"), strings.HasSuffix(ext, ".xml"):
		case strings.HasSuffix(ext, ".dmn"), strings.HasSuffix(ext, ".form"):
			problems = append(problems, fmt.Sprintf("'%s': decisions and forms are not supported by the shardctl shard simulator", r.GetName()))
			continue
		default:
			problems = append(problems, fmt.Sprintf("'%s': Resource type is not supported. Supported resource types are: .bpmn, .xml, .dmn, .form", r.GetName()))
			continue
		}
		pr, err := parseResource(r.GetName(), r.GetContent())
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		parsed = append(parsed, pr)
	}
	if len(problems) > 0 {
		return 0, nil, rejection(codes.InvalidArgument, "CREATE", "Expected to deploy new resources, but encountered the following errors:\n%s", strings.Join(problems, "\n"))
	}
	p1 := g.c.partitions[0]
	type deployed struct {
		key   int64
		procs []*process
	}
	d, err := execOn(ctx, p1, classExempt, func() (deployed, error) {
		return deployed{key: p1.keys.next(), procs: g.c.repo.deploy(g.c.physicalTenant(ctx), parsed, &p1.keys)}, nil
	})
	return d.key, d.procs, err
}

func (g *gateway) DeployResource(ctx context.Context, req *pb.DeployResourceRequest) (*pb.DeployResourceResponse, error) {
	if err := checkTenant("DeployResource", req.GetTenantId()); err != nil {
		return nil, err
	}
	key, procs, err := g.deploy(ctx, req.GetResources())
	if err != nil {
		return nil, err
	}
	resp := &pb.DeployResourceResponse{Key: key, TenantId: defaultTenant}
	for _, p := range procs {
		resp.Deployments = append(resp.Deployments, &pb.Deployment{Metadata: &pb.Deployment_Process{Process: p.metadata()}})
	}
	return resp, nil
}

func (p *process) metadata() *pb.ProcessMetadata {
	return &pb.ProcessMetadata{BpmnProcessId: p.id, Version: p.version, ProcessDefinitionKey: p.key, ResourceName: p.resourceName, TenantId: defaultTenant}
}

// resolveProcess finds the process a create request names.
func (g *gateway) resolveProcess(ctx context.Context, req *pb.CreateProcessInstanceRequest) (*process, error) {
	repo := g.c.repo
	tenant := g.c.physicalTenant(ctx)
	switch {
	case req.GetProcessDefinitionKey() > 0:
		if p := repo.byDefinitionKey(req.GetProcessDefinitionKey()); p != nil {
			return p, nil
		}
		return nil, rejection(codes.NotFound, "CREATE", "Expected to find process definition with key '%d', but none found", req.GetProcessDefinitionKey())
	case req.GetBpmnProcessId() != "":
		var p *process
		if req.GetVersion() < 0 {
			p = repo.latest(tenant, req.GetBpmnProcessId())
			if p == nil {
				return nil, rejection(codes.NotFound, "CREATE", "Expected to find process definition with process ID '%s', but none found", req.GetBpmnProcessId())
			}
		} else if p = repo.version(tenant, req.GetBpmnProcessId(), req.GetVersion()); p == nil {
			return nil, rejection(codes.NotFound, "CREATE", "Expected to find process definition with process ID '%s' and version '%d', but none found", req.GetBpmnProcessId(), req.GetVersion())
		}
		return p, nil
	}
	return nil, invalid("Expected at least a bpmnProcessId or a key greater than -1, but none given")
}

func startElements(proc *process, req *pb.CreateProcessInstanceRequest) ([]*bpmn.Element, error) {
	if len(req.GetStartInstructions()) == 0 {
		if proc.model.NoneStart == nil {
			return nil, rejection(codes.InvalidArgument, "CREATE", "Expected to create instance of process with none start event, but there is no such event")
		}
		return []*bpmn.Element{proc.model.NoneStart}, nil
	}
	var out []*bpmn.Element
	for _, in := range req.GetStartInstructions() {
		el := proc.model.Elements[in.GetElementId()]
		if el == nil {
			return nil, rejection(codes.InvalidArgument, "CREATE", "Expected to create instance of process with start instructions but no element found with id '%s'.", in.GetElementId())
		}
		out = append(out, el)
	}
	return out, nil
}

// create starts an instance on the next partition that accepts it; like
// Zeebe's gateway it tries the others when one applies backpressure.
func (g *gateway) create(ctx context.Context, req *pb.CreateProcessInstanceRequest, waiter chan instanceResult) (*pb.CreateProcessInstanceResponse, error) {
	if req == nil {
		return nil, invalid("Expected a create process instance request, but none given")
	}
	if err := checkTenant("CreateProcessInstance", req.GetTenantId()); err != nil {
		return nil, err
	}
	proc, err := g.resolveProcess(ctx, req)
	if err != nil {
		return nil, err
	}
	starts, err := startElements(proc, req)
	if err != nil {
		return nil, err
	}
	vars, err := variables("variables", req.GetVariables())
	if err != nil {
		return nil, err
	}
	labels, err := g.labels(req)
	if err != nil {
		return nil, err
	}
	n := len(g.c.partitions)
	first := int(g.c.rr.Add(1))
	for i := range n {
		p := g.c.partitions[(first+i)%n]
		key, err := execOn(ctx, p, classCreate, func() (int64, error) {
			var w chan<- instanceResult
			if waiter != nil {
				w = waiter
			}
			return p.createInstance(proc, copyVars(vars), starts, w, labels).key, nil
		})
		if status.Code(err) == codes.ResourceExhausted {
			continue
		}
		if err != nil {
			return nil, err
		}
		return &pb.CreateProcessInstanceResponse{
			ProcessDefinitionKey: proc.key, BpmnProcessId: proc.id, Version: proc.version,
			ProcessInstanceKey: key, TenantId: defaultTenant, Tags: labels.tags, BusinessId: labels.businessID,
		}, nil
	}
	return nil, errBackpressure()
}

func (g *gateway) CreateProcessInstance(ctx context.Context, req *pb.CreateProcessInstanceRequest) (*pb.CreateProcessInstanceResponse, error) {
	return g.create(ctx, req, nil)
}

func (g *gateway) CreateProcessInstanceWithResult(ctx context.Context, req *pb.CreateProcessInstanceWithResultRequest) (*pb.CreateProcessInstanceWithResultResponse, error) {
	timeout := millis(req.GetRequestTimeout())
	if timeout <= 0 {
		timeout = defaultResultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	waiter := make(chan instanceResult, 1)
	created, err := g.create(ctx, req.GetRequest(), waiter)
	if err != nil {
		return nil, err
	}
	select {
	case res := <-waiter:
		if res.err != nil {
			return nil, res.err
		}
		return &pb.CreateProcessInstanceWithResultResponse{
			ProcessDefinitionKey: created.ProcessDefinitionKey, BpmnProcessId: created.BpmnProcessId,
			Version: created.Version, ProcessInstanceKey: created.ProcessInstanceKey,
			Variables: encodeVariables(filterVariables(res.vars, req.GetFetchVariables())), TenantId: defaultTenant,
			Tags: created.Tags, BusinessId: created.BusinessId,
		}, nil
	case <-ctx.Done():
		return nil, status.Errorf(codes.DeadlineExceeded, "Expected to receive the result of process instance '%d' within %s, but it did not complete in time", created.ProcessInstanceKey, timeout)
	}
}

func (g *gateway) CancelProcessInstance(ctx context.Context, req *pb.CancelProcessInstanceRequest) (*pb.CancelProcessInstanceResponse, error) {
	p, err := g.byKey(req.GetProcessInstanceKey())
	if err != nil {
		return nil, err
	}
	_, err = execOn(ctx, p, classExempt, func() (struct{}, error) {
		inst := p.state.instances[req.GetProcessInstanceKey()]
		if inst == nil {
			return struct{}{}, rejection(codes.NotFound, "CANCEL", "Expected to cancel a process instance with key '%d', but no such process was found", req.GetProcessInstanceKey())
		}
		p.terminate(inst)
		return struct{}{}, nil
	})
	if err != nil {
		return nil, err
	}
	return &pb.CancelProcessInstanceResponse{}, nil
}

// onJob runs fn on the partition of a job key.
func (g *gateway) onJob(ctx context.Context, cl class, key int64, fn func(p *partition) error) error {
	p, err := g.byKey(key)
	if err != nil {
		return err
	}
	_, err = execOn(ctx, p, cl, func() (struct{}, error) { return struct{}{}, fn(p) })
	return err
}

func (g *gateway) CompleteJob(ctx context.Context, req *pb.CompleteJobRequest) (*pb.CompleteJobResponse, error) {
	vars, err := variables("variables", req.GetVariables())
	if err != nil {
		return nil, err
	}
	if err := g.onJob(ctx, classExempt, req.GetJobKey(), func(p *partition) error { return p.completeJob(req.GetJobKey(), vars) }); err != nil {
		return nil, err
	}
	return &pb.CompleteJobResponse{}, nil
}

func (g *gateway) FailJob(ctx context.Context, req *pb.FailJobRequest) (*pb.FailJobResponse, error) {
	vars, err := variables("variables", req.GetVariables())
	if err != nil {
		return nil, err
	}
	if req.GetRetryBackOff() < 0 {
		return nil, invalid("Expected retryBackOff to be zero or greater, but was %d", req.GetRetryBackOff())
	}
	backoff := millis(req.GetRetryBackOff())
	err = g.onJob(ctx, classExempt, req.GetJobKey(), func(p *partition) error {
		return p.failJob(req.GetJobKey(), req.GetRetries(), req.GetErrorMessage(), backoff, vars)
	})
	if err != nil {
		return nil, err
	}
	return &pb.FailJobResponse{}, nil
}

func (g *gateway) ThrowError(ctx context.Context, req *pb.ThrowErrorRequest) (*pb.ThrowErrorResponse, error) {
	if strings.TrimSpace(req.GetErrorCode()) == "" {
		return nil, invalid("Expected to throw an error with a non-empty error code, but it was empty")
	}
	vars, err := variables("variables", req.GetVariables())
	if err != nil {
		return nil, err
	}
	err = g.onJob(ctx, classClient, req.GetJobKey(), func(p *partition) error {
		return p.throwError(req.GetJobKey(), req.GetErrorCode(), req.GetErrorMessage(), vars)
	})
	if err != nil {
		return nil, err
	}
	return &pb.ThrowErrorResponse{}, nil
}

func (g *gateway) UpdateJobRetries(ctx context.Context, req *pb.UpdateJobRetriesRequest) (*pb.UpdateJobRetriesResponse, error) {
	if req.GetRetries() < 1 {
		return nil, invalid("Expected retries to be greater than zero, but it was %d", req.GetRetries())
	}
	if err := g.onJob(ctx, classClient, req.GetJobKey(), func(p *partition) error { return p.updateRetries(req.GetJobKey(), req.GetRetries()) }); err != nil {
		return nil, err
	}
	return &pb.UpdateJobRetriesResponse{}, nil
}

func (g *gateway) UpdateJobTimeout(ctx context.Context, req *pb.UpdateJobTimeoutRequest) (*pb.UpdateJobTimeoutResponse, error) {
	if req.GetTimeout() < 0 {
		return nil, invalid("Expected timeout to be zero or greater, but was %d", req.GetTimeout())
	}
	timeout := millis(req.GetTimeout())
	if err := g.onJob(ctx, classClient, req.GetJobKey(), func(p *partition) error { return p.updateTimeout(req.GetJobKey(), timeout) }); err != nil {
		return nil, err
	}
	return &pb.UpdateJobTimeoutResponse{}, nil
}

func (g *gateway) SetVariables(ctx context.Context, req *pb.SetVariablesRequest) (*pb.SetVariablesResponse, error) {
	vars, err := variables("variables", req.GetVariables())
	if err != nil {
		return nil, err
	}
	if vars == nil {
		return nil, invalid("Property 'variables' is invalid: Expected document to be a root level object, but was '%s'", truncate(req.GetVariables(), 64))
	}
	p, err := g.byKey(req.GetElementInstanceKey())
	if err != nil {
		return nil, err
	}
	key, err := execOn(ctx, p, classClient, func() (int64, error) {
		k := req.GetElementInstanceKey()
		var inst *instance
		if ei := p.state.elements[k]; ei != nil {
			inst = ei.inst
		} else if i := p.state.instances[k]; i != nil {
			inst = i
		}
		if inst == nil {
			return 0, rejection(codes.NotFound, "UPDATE", "Expected to update variables for element with key '%d', but no such element was found", k)
		}
		p.mergeVars(inst, vars)
		return p.keys.next(), nil
	})
	if err != nil {
		return nil, err
	}
	return &pb.SetVariablesResponse{Key: key}, nil
}

func (g *gateway) ResolveIncident(ctx context.Context, req *pb.ResolveIncidentRequest) (*pb.ResolveIncidentResponse, error) {
	p, err := g.byKey(req.GetIncidentKey())
	if err != nil {
		return nil, err
	}
	if _, err := execOn(ctx, p, classClient, func() (struct{}, error) { return struct{}{}, p.resolveIncident(req.GetIncidentKey()) }); err != nil {
		return nil, err
	}
	return &pb.ResolveIncidentResponse{}, nil
}

func (g *gateway) PublishMessage(ctx context.Context, req *pb.PublishMessageRequest) (*pb.PublishMessageResponse, error) {
	if err := checkTenant("PublishMessage", req.GetTenantId()); err != nil {
		return nil, err
	}
	if strings.TrimSpace(req.GetName()) == "" {
		return nil, invalid("Expected to publish a message with a non-empty name, but it was empty")
	}
	if req.GetTimeToLive() < 0 {
		return nil, invalid("Expected timeToLive to be zero or greater, but was %d", req.GetTimeToLive())
	}
	vars, err := variables("variables", req.GetVariables())
	if err != nil {
		return nil, err
	}
	p := g.c.partitionFor(messagePartition(req.GetCorrelationKey(), g.c.cfg.Partitions))
	ttl := millis(req.GetTimeToLive())
	key, err := execOn(ctx, p, classClient, func() (int64, error) {
		return p.publish(req.GetName(), req.GetCorrelationKey(), req.GetMessageId(), ttl, vars)
	})
	if err != nil {
		return nil, err
	}
	return &pb.PublishMessageResponse{Key: key, TenantId: defaultTenant}, nil
}

func (g *gateway) BroadcastSignal(ctx context.Context, req *pb.BroadcastSignalRequest) (*pb.BroadcastSignalResponse, error) {
	if err := checkTenant("BroadcastSignal", req.GetTenantId()); err != nil {
		return nil, err
	}
	if strings.TrimSpace(req.GetSignalName()) == "" {
		return nil, invalid("Expected to broadcast a signal with a non-empty name, but it was empty")
	}
	vars, err := variables("variables", req.GetVariables())
	if err != nil {
		return nil, err
	}
	p1 := g.c.partitions[0]
	key, err := execOn(ctx, p1, classClient, func() (int64, error) { return p1.broadcastSignal(req.GetSignalName(), vars), nil })
	if err != nil {
		return nil, err
	}
	return &pb.BroadcastSignalResponse{Key: key, TenantId: defaultTenant}, nil
}

// EvaluateConditional (8.9) starts an instance of every process whose
// conditional start event's condition holds for the variables given: of
// the process definition named, or of the latest version of every one.
// Like a broadcast signal it is processed on the first partition.
func (g *gateway) EvaluateConditional(ctx context.Context, req *pb.EvaluateConditionalRequest) (*pb.EvaluateConditionalResponse, error) {
	if !g.c.cfg.Version.conditionals() {
		return nil, g.unknownMethod("EvaluateConditional")
	}
	if err := checkTenant("EvaluateConditional", req.GetTenantId()); err != nil {
		return nil, err
	}
	vars, err := variables("variables", req.GetVariables())
	if err != nil {
		return nil, err
	}
	procs := g.c.repo.latestAll()
	if k := req.GetProcessDefinitionKey(); k != 0 {
		proc := g.c.repo.byDefinitionKey(k)
		if proc == nil {
			return nil, rejection(codes.NotFound, "EVALUATE", "Expected to evaluate conditional start events of process definition with key '%d', but no such process was found", k)
		}
		procs = []*process{proc}
	}
	p1 := g.c.partitions[0]
	started, err := execOn(ctx, p1, classCreate, func() ([]*pb.ProcessInstanceReference, error) {
		return p1.evaluateConditionals(procs, vars), nil
	})
	if err != nil {
		return nil, err
	}
	return &pb.EvaluateConditionalResponse{ProcessInstances: started}, nil
}

// unknownMethod is a method this version's gateway does not have, as
// grpc-java answers one.
func (g *gateway) unknownMethod(rpc string) error {
	return status.Errorf(codes.Unimplemented, "Method not found: gateway_protocol.Gateway/%s (Zeebe %s has no %s)", rpc, g.c.cfg.Version, rpc)
}

func (g *gateway) EvaluateDecision(context.Context, *pb.EvaluateDecisionRequest) (*pb.EvaluateDecisionResponse, error) {
	return nil, notSupported("EvaluateDecision")
}

func (g *gateway) ModifyProcessInstance(context.Context, *pb.ModifyProcessInstanceRequest) (*pb.ModifyProcessInstanceResponse, error) {
	return nil, notSupported("ModifyProcessInstance")
}

func (g *gateway) MigrateProcessInstance(context.Context, *pb.MigrateProcessInstanceRequest) (*pb.MigrateProcessInstanceResponse, error) {
	return nil, notSupported("MigrateProcessInstance")
}

func (g *gateway) DeleteResource(context.Context, *pb.DeleteResourceRequest) (*pb.DeleteResourceResponse, error) {
	return nil, notSupported("DeleteResource")
}

// maxMillis caps durations from requests (milliseconds) so that a huge
// value means "practically never" instead of overflowing into the past.
const maxMillis = int64(100 * 365 * 24 * time.Hour / time.Millisecond)

func millis(ms int64) time.Duration {
	return time.Duration(min(ms, maxMillis)) * time.Millisecond
}

// Camunda's TagSet: at most maxTags, each a letter and then letters,
// digits or _-:. up to 100 characters.
const maxTags = 10

var tagPattern = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_\-:.]{0,99}$`)

// labels reads what a creation names its instance by, as far as the
// version played knows it: an older gateway ignores the fields it does
// not have, as protobuf does.
func (g *gateway) labels(req *pb.CreateProcessInstanceRequest) (instanceLabels, error) {
	var l instanceLabels
	v := g.c.cfg.Version
	if v.instanceTags() && len(req.GetTags()) > 0 {
		if len(req.GetTags()) > maxTags {
			return l, invalid("Expected at most %d tags, but %d were given", maxTags, len(req.GetTags()))
		}
		for _, t := range req.GetTags() {
			if !tagPattern.MatchString(t) {
				return l, invalid("Expected tag '%s' to start with a letter and then hold only letters, digits, '_', '-', ':' or '.', at most 100 characters", t)
			}
		}
		l.tags = slices.Clone(req.GetTags())
		b, _ := json.Marshal(l.tags)
		l.tagsJSON = string(b)
	}
	if v.businessIDs() && req.BusinessId != nil {
		id := req.GetBusinessId()
		l.businessID = &id
	}
	return l, nil
}
