package proxy

import (
	"context"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/shardctl/shardctl/internal/budget"
	pb "github.com/shardctl/shardctl/internal/gatewaypb"
	"github.com/shardctl/shardctl/internal/keyslot"
	"github.com/shardctl/shardctl/internal/load"
	"github.com/shardctl/shardctl/internal/proxy/proxyapi"
	"github.com/shardctl/shardctl/internal/proxy/route"
	"github.com/shardctl/shardctl/internal/sim"
	"github.com/shardctl/shardctl/internal/sim/simtest"
)

// fakeGateway answers Topology with a chosen partition count and records
// the authorization it receives: the simulator cannot have 128 partitions,
// and does not look at credentials.
type fakeGateway struct {
	pb.UnimplementedGatewayServer
	partitions int32
	mu         sync.Mutex
	auth       []string
	tenants    []string // camunda-physical-tenant, 8.10's
}

func (f *fakeGateway) record(ctx context.Context) {
	md, _ := metadata.FromIncomingContext(ctx)
	f.mu.Lock()
	f.auth = append(f.auth, md.Get("authorization")...)
	f.tenants = append(f.tenants, md.Get("camunda-physical-tenant")...)
	f.mu.Unlock()
}

func (f *fakeGateway) forget() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.auth, f.tenants = nil, nil
}

// seen is the authorization and physical tenant of the last call.
func (f *fakeGateway) seen() (auth, tenant string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.auth) > 0 {
		auth = f.auth[len(f.auth)-1]
	}
	if len(f.tenants) > 0 {
		tenant = f.tenants[len(f.tenants)-1]
	}
	return auth, tenant
}

func (f *fakeGateway) CreateProcessInstance(ctx context.Context, req *pb.CreateProcessInstanceRequest) (*pb.CreateProcessInstanceResponse, error) {
	f.record(ctx)
	return &pb.CreateProcessInstanceResponse{BpmnProcessId: req.GetBpmnProcessId(), Version: 1, ProcessDefinitionKey: 1, ProcessInstanceKey: 2, TenantId: "<default>"}, nil
}

func (f *fakeGateway) Topology(ctx context.Context, _ *pb.TopologyRequest) (*pb.TopologyResponse, error) {
	f.record(ctx)
	return &pb.TopologyResponse{PartitionsCount: f.partitions, ClusterSize: 1, GatewayVersion: "8.5.20",
		Brokers: []*pb.BrokerInfo{{NodeId: 0, Host: "fake", Port: 26501}}}, nil
}

func startFake(t *testing.T, partitions int32) (*fakeGateway, string) {
	t.Helper()
	f := &fakeGateway{partitions: partitions}
	return f, serveGateway(t, f)
}

// serveGateway serves gw on a free loopback port until the test ends.
func serveGateway(t *testing.T, gw pb.GatewayServer, opts ...grpc.ServerOption) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(opts...)
	pb.RegisterGatewayServer(srv, gw)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-done
	})
	return ln.Addr().String()
}

func TestRefusesShardWithTooManyPartitions(t *testing.T) {
	_, addr := startFake(t, 128)
	p, err := New(Config{Front: os.Getenv(envFront), Listen: "127.0.0.1:0", Shards: []proxyapi.ShardConfig{{ID: "huge", Addr: addr, Slot: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	err = p.Start(context.Background())
	if err == nil || !strings.Contains(err.Error(), "has 128 partitions") {
		t.Fatalf("start with a 128-partition shard: %v", err)
	}
}

func TestForwardsAuthorization(t *testing.T) {
	f, addr := startFake(t, 3)
	p := startProxy(t, Config{Shards: []proxyapi.ShardConfig{{ID: "a", Addr: addr, Slot: 1, PhysicalTenants: []string{"green"}}}})
	conn := dial(t, p.Addr().String())
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer s3cret")
	if _, err := pb.NewGatewayClient(conn).Topology(ctx, &pb.TopologyRequest{}); err != nil {
		t.Fatal(err)
	}
	if auth, _ := f.seen(); auth != "Bearer s3cret" {
		t.Errorf("Topology: shard saw authorization %q", auth)
	}
	// A creation, forwarded as frames, carries the physical tenant too.
	f.forget()
	ctx = metadata.AppendToOutgoingContext(ctx, "camunda-physical-tenant", "green")
	if _, err := pb.NewGatewayClient(conn).CreateProcessInstance(ctx, &pb.CreateProcessInstanceRequest{BpmnProcessId: "p", Version: -1}); err != nil {
		t.Fatal(err)
	}
	if auth, tenant := f.seen(); auth != "Bearer s3cret" || tenant != "green" {
		t.Errorf("CreateProcessInstance: shard saw authorization %q, physical tenant %q", auth, tenant)
	}
}

// TestRESTForwardsAuthorizationAndTenant: a REST client's credentials
// and 8.10's physical-tenant path prefix reach the shard as the metadata
// a gRPC client sends.
func TestRESTForwardsAuthorizationAndTenant(t *testing.T) {
	f, addr := startFake(t, 3)
	p := startProxy(t, Config{Shards: []proxyapi.ShardConfig{{ID: "a", Addr: addr, Slot: 1, PhysicalTenants: []string{"blue"}}}, RESTListen: "127.0.0.1:0"})
	for _, tc := range []struct{ method, path, body string }{
		{"GET", "/physical-tenants/blue/v2/topology", ""},
		{"POST", "/physical-tenants/blue/v2/process-instances", `{"processDefinitionId":"p"}`}, // the proxy's fast path
	} {
		f.forget()
		req, err := http.NewRequest(tc.method, "http://"+p.RESTAddr().String()+tc.path, strings.NewReader(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer s3cret")
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s %s: %s", tc.method, tc.path, resp.Status)
		}
		if auth, tenant := f.seen(); auth != "Bearer s3cret" || tenant != "blue" {
			t.Errorf("%s %s: shard saw authorization %q, physical tenant %q", tc.method, tc.path, auth, tenant)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no shards", Config{}, "no shards"},
		{"slot 0", Config{Shards: []proxyapi.ShardConfig{{ID: "a", Addr: "h:1", Slot: 0}}}, "slot 0"},
		{"slot 32", Config{Shards: []proxyapi.ShardConfig{{ID: "a", Addr: "h:1", Slot: 32}}}, "slot 32"},
		{"shared slot", Config{Shards: []proxyapi.ShardConfig{{ID: "a", Addr: "h:1", Slot: 1}, {ID: "b", Addr: "h:2", Slot: 1}}}, "both have slot 1"},
		{"same id", Config{Shards: []proxyapi.ShardConfig{{ID: "a", Addr: "h:1", Slot: 1}, {ID: "a", Addr: "h:2", Slot: 2}}}, "named twice"},
		{"bad address", Config{Shards: []proxyapi.ShardConfig{{ID: "a", Addr: "nowhere", Slot: 1}}}, "HOST:PORT"},
		{"unknown legacy", Config{Shards: []proxyapi.ShardConfig{{ID: "a", Addr: "h:1", Slot: 1}}, LegacyShard: "b"}, "legacy shard"},
		{"bad state", Config{Shards: []proxyapi.ShardConfig{{ID: "a", Addr: "h:1", Slot: 1, State: "SLEEPY"}}}, "unknown shard state"},
	}
	for _, tt := range tests {
		if _, err := New(tt.cfg); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want an error containing %q", tt.name, err, tt.want)
		}
	}
	for _, tt := range []struct{ flag, want string }{
		{"a", "want ID=HOST:PORT"},
		{"a=h:1,slot=x", "not a number"},
		{"a=h:1,color=red", "unknown option"},
		{"a=h:1,state=NOPE", "unknown shard state"},
		{"a=h:1,rest=h:8080", "want http://HOST:PORT"},
		{"a=h:1,rest=ftp://h:8080", "want http://HOST:PORT"},
		{"a=h:1,tenant=", "1 to 31"},
		{"a=h:1,tenant=a b", "letters, digits"},
	} {
		if _, err := route.ParseShardFlag(tt.flag, 1); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("--shard %s: %v, want %q", tt.flag, err, tt.want)
		}
	}
	sc, err := route.ParseShardFlag("green=10.0.0.1:26500,slot=7,state=draining,rest=https://10.0.0.1:8080,tenant=default,tenant=acme,tenant=acme", 1)
	if err != nil || sc.Slot != 7 || sc.State != proxyapi.Draining || sc.Addr != "10.0.0.1:26500" || sc.REST != "https://10.0.0.1:8080" ||
		strings.Join(sc.PhysicalTenants, ",") != "default,acme" {
		t.Errorf("parsed %+v, %v", sc, err)
	}
}

// A shard that joins later is replayed the ledger before it takes new
// instances, and a DRAINING shard gets no new instances but still serves
// jobs.
func TestAddShardReplaysAndDrainingShardsKeepServingJobs(t *testing.T) {
	shards := simtest.StartN(t, 3, sim.Config{Partitions: 1})
	cfgs := simtest.ShardConfigs(shards)
	p := startProxy(t, Config{Shards: cfgs[:2]})
	c := newClient(t, p.Addr().String())
	ctx := budget.Context(t, time.Minute)
	for _, xml := range [][]byte{load.Process("p", "a"), load.Process("p", "a", "b")} {
		if _, err := c.NewDeployResourceCommand().AddResource(xml, "p.bpmn").Send(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.AddShard(ctx, cfgs[2], true); err != nil {
		t.Fatal(err)
	}
	// The newcomer has both versions, with the same numbers.
	direct := newClient(t, shards[2].Addr().String())
	for _, v := range []int32{1, 2} {
		if _, err := direct.NewCreateInstanceCommand().BPMNProcessId("p").Version(v).Send(ctx); err != nil {
			t.Errorf("version %d on the added shard: %v", v, err)
		}
	}
	// Version 1's definition key from slot 1 runs on the added shard too.
	r1, err := c.NewCreateInstanceCommand().BPMNProcessId("p").Version(1).Send(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for range 9 {
		r, err := c.NewCreateInstanceCommand().ProcessDefinitionKey(r1.ProcessDefinitionKey).Send(ctx)
		if err != nil || r.Version != 1 {
			t.Fatalf("create by key: %+v, %v", r, err)
		}
	}

	// Drain shard-1: no new instances there, its jobs still come.
	onFirst := newClient(t, shards[0].Addr().String())
	for range 3 {
		if _, err := onFirst.NewCreateInstanceCommand().BPMNProcessId("p").Version(1).Send(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.SetState("shard-1", proxyapi.Draining); err != nil {
		t.Fatal(err)
	}
	for range 30 {
		r, err := c.NewCreateInstanceCommand().BPMNProcessId("p").LatestVersion().Send(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if slot, _ := keyslot.Split(r.ProcessInstanceKey); slot == 1 {
			t.Fatal("a DRAINING shard got a new instance")
		}
	}
	before := simMetric(t, shards[0], "zeebe_job_events_total", `action="completed"`)
	for {
		// No deadline on the context: the client asks not to long-poll.
		jobs, err := c.NewActivateJobsCommand().JobType("a").MaxJobsToActivate(100).Send(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(jobs) == 0 {
			break
		}
		for _, j := range jobs {
			if _, err := c.NewCompleteJobCommand().JobKey(j.Key).Send(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	if after := simMetric(t, shards[0], "zeebe_job_events_total", `action="completed"`); after <= before {
		t.Error("the DRAINING shard's jobs were not served")
	}
	if err := p.SetState("nope", proxyapi.Up); err == nil {
		t.Error("SetState of an unknown shard succeeded")
	}
}
