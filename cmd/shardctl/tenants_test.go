package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/shardctl/shardctl/internal/budget"
	pb "github.com/shardctl/shardctl/internal/gatewaypb"
	"github.com/shardctl/shardctl/internal/keyslot"
	"github.com/shardctl/shardctl/internal/load"
	"github.com/shardctl/shardctl/internal/physicaltenant"
)

// Physical tenants from the registry: a simulator registers the tenants
// it serves (sim serve --physical-tenants --register), the proxy follows
// the registry and places each tenant's instances on its shards only;
// `shards register --physical-tenants` writes them for a shard without a
// sidecar and refuses a name that is not one, registering nothing.
func TestPhysicalTenantsFromTheRegistry(t *testing.T) {
	t.Parallel()
	f := newFederation(t)
	f.startSim(t, "blue-1", "blue")                                       // default only
	f.startSim(t, "blue-2", "blue", "--physical-tenants", "acme,default") // both
	f.startSim(t, "blue-3", "blue", "--physical-tenants", "acme")         // acme only
	f.startProxy(t)
	slots := map[string]int{}
	budget.Eventually(t, 20*time.Second, "three shards in the proxy", func() bool {
		for _, s := range f.view(t).Shards {
			slots[s.ID] = s.Slot
		}
		return len(slots) == 3
	})
	conn, err := grpc.NewClient(f.proxy.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	gw := pb.NewGatewayClient(conn)
	ctx := budget.Context(t, time.Minute)
	for _, tenant := range []string{"", "acme"} {
		tctx := ctx
		if tenant != "" {
			tctx = metadata.AppendToOutgoingContext(ctx, physicaltenant.Header, tenant)
		}
		if _, err := gw.DeployResource(tctx, &pb.DeployResourceRequest{Resources: []*pb.Resource{{Name: "p.bpmn", Content: load.Process("p", "work")}}}); err != nil {
			t.Fatalf("deploy in tenant %q: %v", tenant, err)
		}
		on := map[int]int{}
		for range 30 {
			resp, err := gw.CreateProcessInstance(tctx, &pb.CreateProcessInstanceRequest{BpmnProcessId: "p", Version: -1})
			if err != nil {
				t.Fatalf("create in tenant %q: %v", tenant, err)
			}
			slot, _ := keyslot.Split(resp.GetProcessInstanceKey())
			on[slot]++
		}
		excluded := map[string]string{"": "blue-3", "acme": "blue-1"}[tenant]
		if on[slots[excluded]] != 0 || len(on) != 2 {
			t.Errorf("tenant %q: instances by slot %v (slots %v): want both shards serving it and none on %s", tenant, on, slots, excluded)
		}
	}

	r := runBin(t, bin, f.env, "", "shards", "register", "gray-1", "--address", "127.0.0.1:1", "--physical-tenants", "acme,a b")
	if r.code == 0 || !strings.Contains(r.stderr, `physical tenant "a b"`) {
		t.Errorf("register with a bad tenant: exit %d, %q: want refused naming it", r.code, r.stderr)
	}
	if r := runBin(t, bin, f.env, "", "shards", "get", "gray-1"); r.code == 0 {
		t.Errorf("a refused registration left gray-1 registered: %s", r.stdout)
	}
	r = runBin(t, bin, f.env, "", "shards", "register", "gray-2", "--address", "127.0.0.1:1", "--pool", "gray", "--physical-tenants", "acme,default")
	if r.code != 0 {
		t.Fatalf("register gray-2: exit %d: %s", r.code, r.stderr)
	}
	r = runBin(t, bin, f.env, "", "shards", "get", "gray-2", "-o", "json")
	var got struct{ Metadata map[string]string }
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || got.Metadata["physicalTenants"] != "acme,default" {
		t.Errorf("shards get gray-2: %v, metadata %v", err, got.Metadata)
	}
}
