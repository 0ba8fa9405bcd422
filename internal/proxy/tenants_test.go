package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/shardctl/shardctl/internal/budget"
	pb "github.com/shardctl/shardctl/internal/gatewaypb"
	"github.com/shardctl/shardctl/internal/keyslot"
	"github.com/shardctl/shardctl/internal/load"
	"github.com/shardctl/shardctl/internal/physicaltenant"
	"github.com/shardctl/shardctl/internal/proxy/route"
	"github.com/shardctl/shardctl/internal/sim"
	"github.com/shardctl/shardctl/internal/sim/simtest"
)

// 8.10's physical tenants through the federation: work for a tenant is
// placed, deployed, fanned out and searched only on the shards that serve
// it, over gRPC (the header) and REST (the path prefix); a tenant no
// shard serves is NOT_FOUND, named; a shard that joins is replayed the
// deployments of its tenants only, each in its tenant.
func TestPhysicalTenantsRouted(t *testing.T) {
	for _, front := range []string{route.FrontFrames, route.FrontGRPC} {
		t.Run(front, func(t *testing.T) { physicalTenantsRouted(t, front) })
	}
}

func physicalTenantsRouted(t *testing.T, front string) {
	cfg := sim.Config{Partitions: 1, RESTListen: "127.0.0.1:0"}
	plain := simtest.Start(t, cfg) // default only
	cfg.PhysicalTenants = []string{"default", "acme"}
	both := simtest.Start(t, cfg)
	cfg.PhysicalTenants = []string{"acme"}
	late := simtest.Start(t, cfg)
	shards := simtest.ShardConfigs([]*sim.Sim{plain, both, late})
	shards[1].PhysicalTenants = []string{"default", "acme"}
	shards[2].PhysicalTenants = []string{"acme"}
	p := startProxy(t, Config{Dynamic: true, Front: front, RESTListen: "127.0.0.1:0", Health: route.HealthConfig{Interval: -1}})
	p.Want(shards[:2])
	shardsReady(t, p, 2)

	gw := pb.NewGatewayClient(dial(t, p.Addr().String()))
	ctx := budget.Context(t, time.Minute)
	inTenant := func(tenant string) context.Context {
		return metadata.AppendToOutgoingContext(ctx, physicaltenant.Header, tenant)
	}
	acme := inTenant("acme")
	deploy := func(name, id string) *pb.DeployResourceRequest {
		return &pb.DeployResourceRequest{Resources: []*pb.Resource{{Name: name, Content: load.Process(id, id+"-work")}}}
	}
	if _, err := gw.DeployResource(acme, deploy("a.bpmn", "a")); err != nil {
		t.Fatalf("deploy in acme: %v", err)
	}
	if _, err := gw.DeployResource(ctx, deploy("d.bpmn", "d")); err != nil {
		t.Fatalf("deploy in default: %v", err)
	}
	// Each shard's own gateway holds what it was sent, in its tenant.
	direct := func(s *sim.Sim) pb.GatewayClient { return pb.NewGatewayClient(dial(t, s.Addr().String())) }
	create := func(id string) *pb.CreateProcessInstanceRequest {
		return &pb.CreateProcessInstanceRequest{BpmnProcessId: id, Version: -1}
	}
	if _, err := direct(both).CreateProcessInstance(acme, create("a")); err != nil {
		t.Errorf("acme's process on the shard serving acme: %v", err)
	}
	if _, err := direct(both).CreateProcessInstance(ctx, create("a")); status.Code(err) != codes.NotFound {
		t.Errorf("acme's process in default on that shard: %v, want NOT_FOUND (deployed to acme only)", err)
	}

	// Placement: acme's instances land on its one shard; default's on both.
	for range 20 {
		resp, err := gw.CreateProcessInstance(acme, create("a"))
		if err != nil {
			t.Fatalf("create in acme: %v", err)
		}
		if slot, _ := keyslot.Split(resp.GetProcessInstanceKey()); slot != 2 {
			t.Fatalf("an acme instance on slot %d: only shard-2 serves acme", slot)
		}
	}
	// The REST front names the tenant in the path.
	body, _ := json.Marshal(map[string]any{"processDefinitionId": "a"})
	for range 5 {
		resp, err := http.Post("http://"+p.RESTAddr().String()+"/physical-tenants/acme/v2/process-instances", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var created struct{ ProcessInstanceKey string }
		err = json.NewDecoder(resp.Body).Decode(&created)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK || err != nil {
			t.Fatalf("REST create in acme: %d %v", resp.StatusCode, err)
		}
		key, err := strconv.ParseInt(created.ProcessInstanceKey, 10, 64)
		if slot, _ := keyslot.Split(key); err != nil || slot != 2 {
			t.Fatalf("a REST acme instance %s not on shard-2", created.ProcessInstanceKey)
		}
	}

	// A tenant no shard serves: NOT_FOUND naming it, for placement,
	// deployment, fan-out, job activation and search.
	nope := inTenant("nope")
	for name, call := range map[string]func() error{
		"create": func() error { _, err := gw.CreateProcessInstance(nope, create("a")); return err },
		"deploy": func() error { _, err := gw.DeployResource(nope, deploy("n.bpmn", "n")); return err },
		"message": func() error {
			_, err := gw.PublishMessage(nope, &pb.PublishMessageRequest{Name: "m", CorrelationKey: "k", TimeToLive: 1000})
			return err
		},
		"jobs": func() error {
			stream, err := gw.ActivateJobs(nope, &pb.ActivateJobsRequest{Type: "a-work", MaxJobsToActivate: 1, Timeout: 1000, RequestTimeout: -1})
			if err == nil {
				_, err = stream.Recv()
			}
			return err
		},
	} {
		if err := call(); status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), "'nope'") {
			t.Errorf("%s in an unserved tenant: %v, want NOT_FOUND naming it", name, err)
		}
	}
	for path, body := range map[string][]byte{"/v2/process-instances": body, "/v2/process-instances/search": []byte("{}")} {
		resp, err := http.Post("http://"+p.RESTAddr().String()+"/physical-tenants/nope"+path, "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("REST %s in an unserved tenant: %d, want 404", path, resp.StatusCode)
		}
	}

	// Jobs of acme are activated from its shard, none asked elsewhere.
	stream, err := gw.ActivateJobs(acme, &pb.ActivateJobsRequest{Type: "a-work", MaxJobsToActivate: 5, Timeout: 10000, RequestTimeout: 2000})
	if n, err := simtest.CountJobs(stream, err); err != nil || n == 0 {
		t.Errorf("activate acme's jobs: %d, %v", n, err)
	}

	// A shard serving acme only joins: it is replayed acme's deployment
	// in acme and not default's, which it could not take.
	p.Want(shards)
	shardsReady(t, p, 3)
	if _, err := direct(late).CreateProcessInstance(acme, create("a")); err != nil {
		t.Errorf("acme's process on the shard that joined: %v", err)
	}
	if st := shardStatus(p, "shard-3"); len(st.PhysicalTenants) != 1 || st.PhysicalTenants[0] != "acme" {
		t.Errorf("GET /shards: shard-3's physical tenants %v", st.PhysicalTenants)
	}
	// A search in acme asks its shards only: shard-1 would refuse the
	// tenant, and the search would fail naming it.
	resp, err := http.Post("http://"+p.RESTAddr().String()+"/physical-tenants/acme/v2/process-instances/search", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("REST search in acme: %d", resp.StatusCode)
	}
	onLate := 0
	for range 40 {
		resp, err := gw.CreateProcessInstance(acme, create("a"))
		if err != nil {
			t.Fatalf("create in acme with two shards serving it: %v", err)
		}
		slot, _ := keyslot.Split(resp.GetProcessInstanceKey())
		if slot == 1 {
			t.Fatal("an acme instance on shard-1, which serves default only")
		}
		if slot == 3 {
			onLate++
		}
	}
	if onLate == 0 {
		t.Error("no acme instance on the shard that joined")
	}
	for range 10 {
		resp, err := gw.CreateProcessInstance(ctx, create("d"))
		if err != nil {
			t.Fatalf("create in default: %v", err)
		}
		if slot, _ := keyslot.Split(resp.GetProcessInstanceKey()); slot == 3 {
			t.Fatal("a default instance on shard-3, which serves acme only")
		}
	}
}
