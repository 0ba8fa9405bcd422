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

	pb "github.com/camunda/zeebe/clients/go/v8/pkg/pb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/shardctl/shardctl/internal/budget"
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

func (f *fakeGateway) Topology(ctx context.Context, _ *pb.TopologyRequest) (*pb.TopologyResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	f.mu.Lock()
	f.auth = append(f.auth, md.Get("authorization")...)
	f.tenants = append(f.tenants, md.Get("camunda-physical-tenant")...)
	f.mu.Unlock()
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
	p := startProxy(t, Config{Shards: []proxyapi.ShardConfig{{ID: "a", Addr: addr, Slot: 1}}})
	conn := dial(t, p.Addr().String())
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer s3cret")
	if _, err := pb.NewGatewayClient(conn).Topology(ctx, &pb.TopologyRequest{}); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.auth) == 0 || f.auth[len(f.auth)-1] != "Bearer s3cret" {
		t.Errorf("shard saw authorization %q", f.auth)
	}
}

// TestRESTForwardsAuthorizationAndTenant: a REST client's credentials
// and 8.10's physical-tenant path prefix reach the shard as the metadata
// a gRPC client sends.
func TestRESTForwardsAuthorizationAndTenant(t *testing.T) {
	f, addr := startFake(t, 3)
	p := startProxy(t, Config{Shards: []proxyapi.ShardConfig{{ID: "a", Addr: addr, Slot: 1}}, RESTListen: "127.0.0.1:0"})
	req, err := http.NewRequest("GET", "http://"+p.RESTAddr().String()+"/physical-tenants/blue/v2/topology", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer s3cret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("topology: %s", resp.Status)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.auth) == 0 || f.auth[len(f.auth)-1] != "Bearer s3cret" || len(f.tenants) == 0 || f.tenants[len(f.tenants)-1] != "blue" {
		t.Errorf("shard saw authorization %q, physical tenants %q", f.auth, f.tenants)
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
	} {
		if _, err := route.ParseShardFlag(tt.flag, 1); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("--shard %s: %v, want %q", tt.flag, err, tt.want)
		}
	}
	sc, err := route.ParseShardFlag("green=10.0.0.1:26500,slot=7,state=draining", 1)
	if err != nil || sc.Slot != 7 || sc.State != proxyapi.Draining || sc.Addr != "10.0.0.1:26500" {
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
	if err := p.AddShard(ctx, cfgs[2]); err != nil {
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
