package sim

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/shardctl/shardctl/internal/budget"
	pb "github.com/shardctl/shardctl/internal/gatewaypb"
	"github.com/shardctl/shardctl/internal/load"
	"github.com/shardctl/shardctl/internal/physicaltenant"
)

// A release before 8.10 ignores the physical tenant header and has no
// /physical-tenants path; 8.10 serves the tenants it is given and refuses
// others as NOT_FOUND, over gRPC and REST, and each tenant versions its
// processes apart.
func TestPhysicalTenantsServed(t *testing.T) {
	for _, tc := range []struct {
		name    string
		version string
		tenants []string
		// served: the answer to a creation in tenant "acme" after a
		// deployment there; apart: whether "default" then lacks it.
		served codes.Code
		apart  bool
		// rest is the status of POST /physical-tenants/acme/v2/process-instances.
		rest int
	}{
		{"8.5 ignores the header", "8.5", nil, codes.OK, false, http.StatusNotFound},
		{"8.8 ignores the header", "8.8", nil, codes.OK, false, http.StatusNotFound},
		{"8.10 default only", "8.10", nil, codes.NotFound, false, http.StatusNotFound},
		{"8.10 serving acme", "8.10", []string{"default", "acme"}, codes.OK, true, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := ParseVersion(tc.version)
			if err != nil {
				t.Fatal(err)
			}
			s := startSim(t, Config{Partitions: 2, Version: v, PhysicalTenants: tc.tenants, RESTListen: "127.0.0.1:0"})
			gw := rawClient(t, s)
			ctx := budget.Context(t, 20*time.Second)
			acme := metadata.AppendToOutgoingContext(ctx, physicaltenant.Header, "acme")
			deploy := &pb.DeployResourceRequest{Resources: []*pb.Resource{{Name: "p.bpmn", Content: load.Process("p", "t")}}}
			_, err = gw.DeployResource(acme, deploy)
			if grpcCode(err) != tc.served {
				t.Fatalf("deploy in acme: %v, want %v", err, tc.served)
			}
			if err != nil {
				if !strings.Contains(err.Error(), "'acme'") || !strings.Contains(err.Error(), "default") {
					t.Errorf("refusal does not name the tenant and those served: %v", err)
				}
			}
			create := &pb.CreateProcessInstanceRequest{BpmnProcessId: "p", Version: -1}
			if _, err := gw.CreateProcessInstance(acme, create); grpcCode(err) != tc.served {
				t.Errorf("create in acme: %v, want %v", err, tc.served)
			}
			_, err = gw.CreateProcessInstance(ctx, create)
			if got, want := grpcCode(err), codes.OK; tc.apart || tc.served != codes.OK {
				want = codes.NotFound // never deployed to default
				if got != want {
					t.Errorf("create in default: %v, want %v", err, want)
				}
			} else if got != want {
				t.Errorf("create in default (the header ignored): %v", err)
			}
			// Streams are refused before the handler runs, like unary calls.
			stream, err := gw.ActivateJobs(acme, &pb.ActivateJobsRequest{Type: "t", MaxJobsToActivate: 1, Timeout: 1000, RequestTimeout: -1})
			if err == nil {
				_, err = stream.Recv()
			}
			if tc.served != codes.OK && grpcCode(err) != codes.NotFound {
				t.Errorf("activate jobs in acme: %v, want NOT_FOUND", err)
			}

			body, _ := json.Marshal(map[string]any{"processDefinitionId": "p"})
			resp, err := http.Post("http://"+s.RESTAddr().String()+"/physical-tenants/acme/v2/process-instances", "application/json", bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			var problem struct{ Title, Detail string }
			_ = json.NewDecoder(resp.Body).Decode(&problem)
			_ = resp.Body.Close()
			if resp.StatusCode != tc.rest {
				t.Errorf("REST create in acme: %d %+v, want %d", resp.StatusCode, problem, tc.rest)
			}
		})
	}
}

// An 8.10 simulator refuses a list of tenants that an older release
// could not serve, and names that do not read as tenant ids.
func TestPhysicalTenantsConfig(t *testing.T) {
	for _, tc := range []struct {
		version string
		tenants []string
		wantErr string
	}{
		{"8.8", []string{"acme"}, "has none"},
		{"8.10", []string{"a b"}, "letters, digits"},
		{"8.10", []string{""}, "1 to 31"},
		{"8.10", []string{"acme", "default"}, ""},
	} {
		v, err := ParseVersion(tc.version)
		if err != nil {
			t.Fatal(err)
		}
		_, err = New(Config{Listen: "127.0.0.1:0", Version: v, PhysicalTenants: tc.tenants})
		if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("%s %v: %v, want %q", tc.version, tc.tenants, err, tc.wantErr)
		}
	}
}
