package grpcfront

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	pb "github.com/shardctl/shardctl/internal/gatewaypb"
	"github.com/shardctl/shardctl/internal/keyslot"
	"github.com/shardctl/shardctl/internal/ledger"
	"github.com/shardctl/shardctl/internal/physicaltenant"
	"github.com/shardctl/shardctl/internal/proxy/pbkeys"
	"github.com/shardctl/shardctl/internal/proxy/proxyapi"
	"github.com/shardctl/shardctl/internal/proxy/route"
	"github.com/shardctl/shardctl/internal/restgateway"
)

// Server is the gateway API over the routing core: each RPC's
// federation rule (placed, by key, fanned out, deployed everywhere) as
// grpc-go handlers. The frame front calls these handlers itself for what
// it does not forward as frames.
type Server struct {
	pb.UnimplementedGatewayServer
	*route.Core
	cfg route.Config
	rr  atomic.Uint64 // where the next job sweep starts
}

// New serves the gateway API over core.
func New(core *route.Core) *Server { return &Server{Core: core, cfg: core.Config()} }

// GatewayVersion is reported in the synthesized topology when the shards
// do not say.
const GatewayVersion = "8.5.20"

func (sv *Server) observe(rpc string, start time.Time, err error) {
	sv.Metrics().Observe(rpc, status.Code(err), time.Since(start))
}

// OnShard names the shard in an error the client sees, keeping its code.
func OnShard(s *route.Shard, err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return status.Errorf(codes.Unavailable, "shard %s: %v", s.ID, err)
	}
	if st.Code() == codes.Canceled || st.Code() == codes.DeadlineExceeded {
		return err
	}
	return status.Errorf(st.Code(), "shard %s: %s", s.ID, st.Message())
}

func isDefinitionKey(fd protoreflect.FieldDescriptor) bool {
	switch fd.Name() {
	case "processDefinitionKey", "targetProcessDefinitionKey":
		return true
	}
	return false
}

// StripFor takes the slots out of a request's keys for the shard it goes
// to. A definition key of another shard is translated through the ledger;
// any other key of another shard cannot be served there.
func (p *Server) StripFor(target *route.Shard) func(protoreflect.FieldDescriptor, int64) (int64, error) {
	return func(fd protoreflect.FieldDescriptor, k int64) (int64, error) {
		if keyslot.None(k) || k < 0 {
			return k, nil
		}
		slot, raw := keyslot.Split(k)
		if slot == target.Slot || (slot == 0 && p.IsLegacy(target)) {
			return raw, nil
		}
		if isDefinitionKey(fd) {
			if src, _, err := p.ShardForKey(k); err == nil {
				if pid, ok := p.Ledger().Process(src.ID, raw); ok {
					if tk, ok := p.Ledger().KeyOn(target.ID, pid); ok {
						return tk, nil
					}
				}
			}
		}
		return 0, status.Errorf(codes.InvalidArgument, "Expected the keys of one request to belong to one shard, but %s %d belongs to slot %d and the request goes to shard %s (slot %d)", fd.Name(), k, slot, target.ID, target.Slot)
	}
}

// byKey forwards a key-addressed request to the shard in its key.
func byKey[Req proto.Message, Resp proto.Message](ctx context.Context, sv *Server, rpc string, req Req, key int64,
	fn func(pb.GatewayClient, context.Context, Req, ...grpc.CallOption) (Resp, error)) (Resp, error) {
	start := time.Now()
	var zero Resp
	s, _, err := sv.ShardForKey(key)
	if err == nil && s.Down() {
		err = route.DownError(s)
	}
	if err != nil {
		sv.observe(rpc, start, err)
		return zero, err
	}
	if err := pbkeys.Rewrite(req.ProtoReflect(), sv.StripFor(s)); err != nil {
		sv.observe(rpc, start, err)
		return zero, err
	}
	resp, err := call(ctx, sv, s, rpc, func(ctx context.Context, c pb.GatewayClient) (Resp, error) { return fn(c, ctx, req) })
	if err != nil {
		err = OnShard(s, err)
		sv.observe(rpc, start, err)
		return zero, err
	}
	pbkeys.Stamp(resp.ProtoReflect(), s.Slot)
	sv.observe(rpc, start, nil)
	return resp, nil
}

// placeNew runs a request that starts something new on the shard that
// power-of-two-choices picks; a shard answering RESOURCE_EXHAUSTED cools
// off and the next best is tried, as is one that could not be reached.
// Anything else, including an ambiguous failure, is the answer: a request
// that may have been executed is never sent twice.
func placeNew[Req proto.Message, Resp proto.Message](ctx context.Context, sv *Server, rpc string, req Req,
	fn func(pb.GatewayClient, context.Context, Req, ...grpc.CallOption) (Resp, error)) (Resp, error) {
	start := time.Now()
	resp, err := sv.place(ctx, rpc, func(ctx context.Context, c pb.GatewayClient) (proto.Message, error) { return fn(c, ctx, req) })
	sv.observe(rpc, start, err)
	if err != nil {
		var zero Resp
		return zero, err
	}
	return resp.(Resp), nil
}

func (p *Server) place(ctx context.Context, rpc string, send func(context.Context, pb.GatewayClient) (proto.Message, error)) (proto.Message, error) {
	var triedOn [keyslot.MaxSlot]*route.Shard // on the stack: this is the hot path
	tried := triedOn[:0]
	var lastErr error
	exhausted := false
	// One clock read per attempt: it picks the shard, times the call, and
	// picks the next one.
	now := time.Now()
	tenant := physicaltenant.Sent(ctx)
	for {
		s := p.Pick(now, tried, tenant)
		if s == nil {
			break
		}
		tried = append(tried, s)
		s.Placing.Add(1)
		sent := now
		resp, err := call(ctx, p, s, rpc, send)
		s.Placing.Add(-1)
		now = time.Now()
		if err == nil || status.Code(err) == codes.DeadlineExceeded {
			s.ObserveLatency(now.Sub(sent), now)
		}
		switch {
		case err == nil:
			s.Choices.Inc()
			switch r := resp.(type) {
			case *pb.CreateProcessInstanceResponse, *pb.CreateProcessInstanceWithResultResponse:
				s.NotePlaced(1)
			case *pb.EvaluateConditionalResponse:
				s.NotePlaced(int64(len(r.GetProcessInstances())))
			}
			pbkeys.Stamp(resp.ProtoReflect(), s.Slot)
			return resp, nil
		case errors.As(err, new(*route.LimitError)):
			lastErr = err // the proxy's own limit: another shard may take it
		case status.Code(err) == codes.ResourceExhausted:
			p.CoolOff(s, err)
			exhausted, lastErr = true, err
		case route.NeverSent(err):
			lastErr = err
		default:
			return nil, OnShard(s, err)
		}
		if ctx.Err() != nil {
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
	return nil, p.PlacementFailed(tenant, lastErr, exhausted)
}

// prepareCreate turns a processDefinitionKey into bpmnProcessId + version
// through the ledger, so any shard can run it. A key the ledger does not
// know (deployed before the proxy) only runs on the shard that issued it.
func (p *Server) prepareCreate(req *pb.CreateProcessInstanceRequest) (*route.Shard, error) {
	if req == nil {
		return nil, status.Error(codes.InvalidArgument, "Expected a create process instance request, but none given")
	}
	k := req.GetProcessDefinitionKey()
	if keyslot.None(k) || k < 0 {
		return nil, nil
	}
	src, raw, err := p.ShardForKey(k)
	if err != nil {
		return nil, err
	}
	if pid, ok := p.Ledger().Process(src.ID, raw); ok {
		req.ProcessDefinitionKey, req.BpmnProcessId, req.Version = 0, pid.BpmnProcessID, pid.Version
		return nil, nil
	}
	// The key stays as it is: byKey routes by it and strips its slot.
	return src, nil
}

// createInstance places a create request, or sends it to the shard that
// issued its definition key when the ledger cannot translate the key.
func createInstance[Req proto.Message, Resp proto.Message](ctx context.Context, sv *Server, rpc string, req Req, create *pb.CreateProcessInstanceRequest,
	fn func(pb.GatewayClient, context.Context, Req, ...grpc.CallOption) (Resp, error)) (Resp, error) {
	only, err := sv.prepareCreate(create)
	if err != nil {
		sv.observe(rpc, time.Now(), err)
		var zero Resp
		return zero, err
	}
	if only != nil {
		return byKey(ctx, sv, rpc, req, create.GetProcessDefinitionKey(), fn)
	}
	return placeNew(ctx, sv, rpc, req, fn)
}

func (sv *Server) CreateProcessInstance(ctx context.Context, req *pb.CreateProcessInstanceRequest) (*pb.CreateProcessInstanceResponse, error) {
	return createInstance(ctx, sv, "CreateProcessInstance", req, req, pb.GatewayClient.CreateProcessInstance)
}

func (sv *Server) CreateProcessInstanceWithResult(ctx context.Context, req *pb.CreateProcessInstanceWithResultRequest) (*pb.CreateProcessInstanceWithResultResponse, error) {
	return createInstance(ctx, sv, "CreateProcessInstanceWithResult", req, req.GetRequest(), pb.GatewayClient.CreateProcessInstanceWithResult)
}

func (sv *Server) EvaluateDecision(ctx context.Context, req *pb.EvaluateDecisionRequest) (*pb.EvaluateDecisionResponse, error) {
	if k := req.GetDecisionKey(); !keyslot.None(k) && k > 0 {
		return byKey(ctx, sv, "EvaluateDecision", req, k, pb.GatewayClient.EvaluateDecision)
	}
	return placeNew(ctx, sv, "EvaluateDecision", req, pb.GatewayClient.EvaluateDecision)
}

// EvaluateConditional (8.9) starts instances as a creation does: placed
// by the same pools, weights, limits and admission, or, for a process
// definition's key, on the shard that issued it (the request names no
// process id that the ledger could place elsewhere).
func (sv *Server) EvaluateConditional(ctx context.Context, req *pb.EvaluateConditionalRequest) (*pb.EvaluateConditionalResponse, error) {
	if k := req.GetProcessDefinitionKey(); !keyslot.None(k) && k > 0 {
		return byKey(ctx, sv, "EvaluateConditional", req, k, pb.GatewayClient.EvaluateConditional)
	}
	return placeNew(ctx, sv, "EvaluateConditional", req, pb.GatewayClient.EvaluateConditional)
}

// deployTargets are the shards a deployment to a physical tenant goes
// to, in slot order: every shard that serves it but those DOWN and those
// that need a replay, which take it from the ledger, in order.
func (p *Server) deployTargets(tenant string) ([]*route.Shard, error) {
	return p.servingWhere(tenant, func(s *route.Shard) bool {
		if s.RoutingState() == proxyapi.Down {
			p.NeedsReplay(s)
			return false
		}
		return !s.NeedsReplay()
	})
}

// servingWhere is the shards that serve a physical tenant (route.Serving)
// and that keep says to keep, in slot order.
func (p *Server) servingWhere(tenant string, keep func(*route.Shard) bool) ([]*route.Shard, error) {
	serving, err := p.Serving(tenant)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(serving, func(s *route.Shard) bool { return !keep(s) }), nil
}

// deployAll sends a deployment to every target shard at once, one
// deployment at a time per proxy (the deploy slot), records it in the
// ledger, and answers with the lowest slot's response. A shard that does
// not take it within DeployTimeout (or fails) does not hold the others
// up: the deployment is recorded, the shard catches up from the ledger
// before it takes instances again, and the client hears which shard it
// was when that shard is UP (deploying again is safe: it is idempotent).
func deployAll[Resp proto.Message](ctx context.Context, sv *Server, rpc string, resources []ledger.Resource,
	send func(context.Context, pb.GatewayClient) (Resp, error), processes func(Resp) []*pb.ProcessMetadata) (Resp, error) {
	p := sv
	start := time.Now()
	var zero Resp
	release, err := p.TakeDeploySlot(ctx)
	if err != nil {
		sv.observe(rpc, start, err)
		return zero, err
	}
	defer release()
	tenant := physicaltenant.Sent(ctx)
	targets, err := p.deployTargets(tenant)
	if err != nil {
		sv.observe(rpc, start, err)
		return zero, err
	}
	results := callEach(ctx, p, targets, rpc, p.cfg.DeployTimeout, send)
	d := ledger.Deployment{Resources: resources, MessageStarts: route.MessageStartsOf(resources), PhysicalTenant: tenant}
	index := map[string]int{} // process version -> position in d.Processes
	var first Resp
	var firstShard *route.Shard
	var behind []*route.Shard // targets that did not take it
	var missed []string       // those of them UP: the client hears of them
	code := codes.Unavailable
	for i, s := range targets {
		resp, err := results[i].resp, results[i].err
		if err != nil {
			behind = append(behind, s)
			if s.State() == proxyapi.Up {
				st := status.Convert(err)
				if st.Code() == codes.DeadlineExceeded && ctx.Err() == nil {
					missed = append(missed, fmt.Sprintf("%s (no answer within %v)", s.ID, p.cfg.DeployTimeout))
				} else {
					missed = append(missed, fmt.Sprintf("%s (%s)", s.ID, st.Message()))
				}
				code = st.Code()
			}
			continue
		}
		for _, pm := range processes(resp) {
			ref := ledger.ProcessRef(pm.GetBpmnProcessId(), pm.GetVersion())
			i, ok := index[ref]
			if !ok {
				i = len(d.Processes)
				index[ref] = i
				d.Processes = append(d.Processes, ledger.ProcessID{BpmnProcessID: pm.GetBpmnProcessId(), Version: pm.GetVersion(), Keys: map[string]int64{}})
			}
			d.Processes[i].Keys[s.ID] = pm.GetProcessDefinitionKey()
		}
		if firstShard == nil {
			first, firstShard = resp, s
		}
	}
	if firstShard == nil {
		err := status.Error(codes.Unavailable, "Expected to deploy to the shards, but none is available")
		if len(missed) > 0 {
			err = status.Errorf(code, "Expected to deploy to the shards, but none took it: %s", strings.Join(missed, ", "))
		}
		sv.observe(rpc, start, err)
		return zero, err
	}
	// Recorded whatever became of the client: the shards that took it
	// have it, and those that did not take it from the ledger.
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.cfg.DeployTimeout)
	rec, err := p.cfg.Ledger.Append(lctx, d)
	cancel()
	// Marked once it is recorded, so that their replays find it: those
	// that did not take it, and those that joined or finished a replay
	// since the targets were chosen.
	for _, s := range behind {
		p.NeedsReplay(s)
	}
	if serving, serr := p.Serving(tenant); serr == nil {
		for _, s := range serving {
			if !slices.Contains(targets, s) && s.RoutingState() != proxyapi.Down {
				p.NeedsReplay(s)
			}
		}
	}
	if err != nil {
		err = status.Errorf(codes.Unavailable, "deployed to every shard, but recording it in the deployment ledger failed: %v; deploy again (it is idempotent)", err)
		sv.observe(rpc, start, err)
		return zero, err
	}
	p.Ledger().Add(rec)
	if len(missed) > 0 {
		err := status.Errorf(code, "deployed and recorded in the deployment ledger, but not taken by %s: it takes no new instances until the ledger is replayed to it; deploying again is safe (it is idempotent)",
			strings.Join(missed, ", "))
		sv.observe(rpc, start, err)
		return zero, err
	}
	pbkeys.Stamp(first.ProtoReflect(), firstShard.Slot)
	sv.observe(rpc, start, nil)
	return first, nil
}

func (sv *Server) DeployResource(ctx context.Context, req *pb.DeployResourceRequest) (*pb.DeployResourceResponse, error) {
	resources := make([]ledger.Resource, len(req.GetResources()))
	for i, r := range req.GetResources() {
		resources[i] = ledger.Resource{Name: r.GetName(), Content: r.GetContent()}
	}
	return deployAll(ctx, sv, "DeployResource", resources,
		func(ctx context.Context, c pb.GatewayClient) (*pb.DeployResourceResponse, error) {
			return c.DeployResource(ctx, req)
		},
		func(r *pb.DeployResourceResponse) []*pb.ProcessMetadata {
			var out []*pb.ProcessMetadata
			for _, d := range r.GetDeployments() {
				if pm := d.GetProcess(); pm != nil {
					out = append(out, pm)
				}
			}
			return out
		})
}

// fanOut sends a request to every shard that serves work (UP or
// DRAINING, and not DOWN), and answers with the lowest slot's response
// when every one succeeded. One failure is the client's error, naming the
// shards that failed and those the request reached: a message lost on the
// shard where the waiting instance lives must not read as published.
func fanOut[Resp proto.Message](ctx context.Context, sv *Server, rpc string, send func(context.Context, pb.GatewayClient) (Resp, error)) (Resp, error) {
	start := time.Now()
	var zero Resp
	targets, err := sv.jobShards(physicaltenant.Sent(ctx))
	if err == nil && len(targets) == 0 {
		err = status.Error(codes.Unavailable, "Expected a shard that is UP or DRAINING, but there is none")
	}
	if err != nil {
		sv.observe(rpc, start, err)
		return zero, err
	}
	results := callEach(ctx, sv, targets, rpc, 0, send)
	var failed []error
	var reached []string
	first := -1
	for i, r := range results {
		if r.err != nil {
			failed = append(failed, OnShard(targets[i], r.err))
			continue
		}
		reached = append(reached, targets[i].ID)
		if first < 0 {
			first = i
		}
	}
	if len(failed) > 0 {
		code := status.Code(failed[0])
		msgs := make([]string, len(failed))
		for i, e := range failed {
			msgs[i] = status.Convert(e).Message()
		}
		if len(reached) == 0 {
			reached = []string{"none"}
		}
		err := status.Errorf(code, "Expected to reach every shard that may hold a subscriber, but %s; reached: %s",
			strings.Join(msgs, "; "), strings.Join(reached, ", "))
		sv.observe(rpc, start, err)
		return zero, err
	}
	pbkeys.Stamp(results[first].resp.ProtoReflect(), targets[first].Slot)
	sv.observe(rpc, start, nil)
	return results[first].resp, nil
}

// PublishMessage: a message that starts a process goes to one shard, so it
// starts one instance; any other goes to every shard that may hold an
// instance waiting for it.
func (sv *Server) PublishMessage(ctx context.Context, req *pb.PublishMessageRequest) (*pb.PublishMessageResponse, error) {
	if sv.Ledger().StartsProcess(physicaltenant.Sent(ctx), req.GetName()) {
		return placeNew(ctx, sv, "PublishMessage", req, pb.GatewayClient.PublishMessage)
	}
	return fanOut(ctx, sv, "PublishMessage", func(ctx context.Context, c pb.GatewayClient) (*pb.PublishMessageResponse, error) {
		return c.PublishMessage(ctx, req)
	})
}

func (sv *Server) BroadcastSignal(ctx context.Context, req *pb.BroadcastSignalRequest) (*pb.BroadcastSignalResponse, error) {
	return fanOut(ctx, sv, "BroadcastSignal", func(ctx context.Context, c pb.GatewayClient) (*pb.BroadcastSignalResponse, error) {
		return c.BroadcastSignal(ctx, req)
	})
}

func (sv *Server) CancelProcessInstance(ctx context.Context, req *pb.CancelProcessInstanceRequest) (*pb.CancelProcessInstanceResponse, error) {
	return byKey(ctx, sv, "CancelProcessInstance", req, req.GetProcessInstanceKey(), pb.GatewayClient.CancelProcessInstance)
}

func (sv *Server) CompleteJob(ctx context.Context, req *pb.CompleteJobRequest) (*pb.CompleteJobResponse, error) {
	return byKey(ctx, sv, "CompleteJob", req, req.GetJobKey(), pb.GatewayClient.CompleteJob)
}

func (sv *Server) FailJob(ctx context.Context, req *pb.FailJobRequest) (*pb.FailJobResponse, error) {
	return byKey(ctx, sv, "FailJob", req, req.GetJobKey(), pb.GatewayClient.FailJob)
}

func (sv *Server) ThrowError(ctx context.Context, req *pb.ThrowErrorRequest) (*pb.ThrowErrorResponse, error) {
	return byKey(ctx, sv, "ThrowError", req, req.GetJobKey(), pb.GatewayClient.ThrowError)
}

func (sv *Server) UpdateJobRetries(ctx context.Context, req *pb.UpdateJobRetriesRequest) (*pb.UpdateJobRetriesResponse, error) {
	return byKey(ctx, sv, "UpdateJobRetries", req, req.GetJobKey(), pb.GatewayClient.UpdateJobRetries)
}

func (sv *Server) UpdateJobTimeout(ctx context.Context, req *pb.UpdateJobTimeoutRequest) (*pb.UpdateJobTimeoutResponse, error) {
	return byKey(ctx, sv, "UpdateJobTimeout", req, req.GetJobKey(), pb.GatewayClient.UpdateJobTimeout)
}

func (sv *Server) SetVariables(ctx context.Context, req *pb.SetVariablesRequest) (*pb.SetVariablesResponse, error) {
	return byKey(ctx, sv, "SetVariables", req, req.GetElementInstanceKey(), pb.GatewayClient.SetVariables)
}

func (sv *Server) ResolveIncident(ctx context.Context, req *pb.ResolveIncidentRequest) (*pb.ResolveIncidentResponse, error) {
	return byKey(ctx, sv, "ResolveIncident", req, req.GetIncidentKey(), pb.GatewayClient.ResolveIncident)
}

func (sv *Server) ModifyProcessInstance(ctx context.Context, req *pb.ModifyProcessInstanceRequest) (*pb.ModifyProcessInstanceResponse, error) {
	return byKey(ctx, sv, "ModifyProcessInstance", req, req.GetProcessInstanceKey(), pb.GatewayClient.ModifyProcessInstance)
}

func (sv *Server) MigrateProcessInstance(ctx context.Context, req *pb.MigrateProcessInstanceRequest) (*pb.MigrateProcessInstanceResponse, error) {
	return byKey(ctx, sv, "MigrateProcessInstance", req, req.GetProcessInstanceKey(), pb.GatewayClient.MigrateProcessInstance)
}

func (sv *Server) DeleteResource(ctx context.Context, req *pb.DeleteResourceRequest) (*pb.DeleteResourceResponse, error) {
	return byKey(ctx, sv, "DeleteResource", req, req.GetResourceKey(), pb.GatewayClient.DeleteResource)
}

// Topology is one synthesized topology: every shard's brokers, with the
// shard's id in the host ("shard-a/10.0.0.5") and node ids made unique
// (slot*1000 + node id), so `zbctl status` through the proxy reads as the
// federation it is. Roles and health are each shard's own (8.8's INACTIVE
// and DEAD included); the gateway version is the oldest shard's, what a
// client can count on everywhere; no cluster id is given, as the
// federation is no one cluster.
func (sv *Server) Topology(ctx context.Context, _ *pb.TopologyRequest) (*pb.TopologyResponse, error) {
	start := time.Now()
	shards := sv.Snapshot()
	out := &pb.TopologyResponse{GatewayVersion: GatewayVersion}
	var mu sync.Mutex
	var wg sync.WaitGroup
	topos := make([]*pb.TopologyResponse, len(shards))
	for i, s := range shards {
		if s.Down() {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			t, err := call(ctx, sv, s, "Topology", func(ctx context.Context, c pb.GatewayClient) (*pb.TopologyResponse, error) {
				return c.Topology(ctx, &pb.TopologyRequest{})
			})
			if err == nil {
				mu.Lock()
				topos[i] = t
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	reached := 0
	for i, t := range topos {
		if t == nil {
			continue
		}
		reached++
		s := shards[i]
		for _, b := range t.GetBrokers() {
			b.NodeId = int32(s.Slot)*1000 + b.GetNodeId()
			b.Host = s.ID + "/" + b.GetHost()
			out.Brokers = append(out.Brokers, b)
		}
		out.ClusterSize += t.GetClusterSize()
		out.PartitionsCount += t.GetPartitionsCount()
		out.ReplicationFactor = max(out.ReplicationFactor, t.GetReplicationFactor())
		if v := t.GetGatewayVersion(); v != "" && (reached == 1 || olderRelease(v, out.GatewayVersion)) {
			out.GatewayVersion = v
		}
	}
	if reached == 0 {
		err := status.Error(codes.Unavailable, "Expected to read the topology of at least one shard, but none answered")
		sv.observe("Topology", start, err)
		return nil, err
	}
	sv.observe("Topology", start, nil)
	return out, nil
}

// olderRelease reports whether release a ("8.5.20") is older than b;
// what does not read as numbers sorts as text.
func olderRelease(a, b string) bool {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(as) && i < len(bs); i++ {
		x, errX := strconv.Atoi(as[i])
		y, errY := strconv.Atoi(bs[i])
		if errX != nil || errY != nil {
			return as[i] < bs[i]
		}
		if x != y {
			return x < y
		}
	}
	return len(as) < len(bs)
}

// forwarded is the metadata a shard must see as the client sent it: its
// credentials, and the physical tenant an 8.10 gateway routes by.
// (The REST front hands both over under these names too.)
var forwarded = []string{restgateway.AuthorizationMD, physicaltenant.Header}

// outgoing forwards the client's metadata that a shard must see.
func outgoing(ctx context.Context) context.Context {
	for _, k := range forwarded {
		// ValueFromIncomingContext does not copy the whole header map.
		if v := metadata.ValueFromIncomingContext(ctx, k); len(v) > 0 {
			ctx = metadata.AppendToOutgoingContext(ctx, k, v[0])
		}
	}
	return ctx
}

// answer is one shard's answer to a call made on several at once.
type answer[T any] struct {
	resp T
	err  error
}

// callEach makes a call on every target at once, each within d (0: the
// caller's deadline only), and returns their answers in targets' order.
func callEach[T any](ctx context.Context, p *Server, targets []*route.Shard, rpc string, d time.Duration, fn func(context.Context, pb.GatewayClient) (T, error)) []answer[T] {
	answers := make([]answer[T], len(targets))
	var wg sync.WaitGroup
	for i, s := range targets {
		wg.Go(func() {
			sctx := ctx
			if d > 0 {
				var cancel context.CancelFunc
				sctx, cancel = context.WithTimeout(ctx, d)
				defer cancel()
			}
			answers[i].resp, answers[i].err = call(sctx, p, s, rpc, fn)
		})
	}
	wg.Wait()
	return answers
}

// call runs one request to a shard, with in-flight accounting, the
// per-shard limit, overload and health bookkeeping, and metrics.
func call[T any](ctx context.Context, p *Server, s *route.Shard, rpc string, fn func(context.Context, pb.GatewayClient) (T, error)) (T, error) {
	if err := p.Enter(s, rpc); err != nil {
		var zero T
		return zero, err
	}
	v, err := fn(outgoing(ctx), s.Conn.Client())
	p.Leave(s, rpc, err, ctx.Err() != nil)
	return v, err
}
