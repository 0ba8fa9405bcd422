package sim

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/shardctl/shardctl/internal/authn"
	"github.com/shardctl/shardctl/internal/budget"
	pb "github.com/shardctl/shardctl/internal/gatewaypb"
)

// A simulator with --auth basic refuses gRPC calls and REST requests
// without the credentials as a secured gateway does (UNAUTHENTICATED;
// 401 with a problem and WWW-Authenticate), serves them with, and keeps
// its metrics open to scrapers.
func TestAuthRequired(t *testing.T) {
	pw := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pw, []byte("demo-pw"), 0o600); err != nil {
		t.Fatal(err)
	}
	check, err := authn.New(authn.Config{Mode: authn.ModeBasic, Username: "demo", PasswordFile: pw})
	if err != nil {
		t.Fatal(err)
	}
	s := startSim(t, Config{Partitions: 1, RESTListen: "127.0.0.1:0", Auth: check})
	gw := rawClient(t, s)
	ctx := budget.Context(t, 20*time.Second)
	basic := "Basic ZGVtbzpkZW1vLXB3" // demo:demo-pw
	if _, err := gw.Topology(ctx, &pb.TopologyRequest{}); grpcCode(err) != codes.Unauthenticated {
		t.Errorf("Topology without credentials: %v, want UNAUTHENTICATED", err)
	}
	stream, err := gw.ActivateJobs(ctx, &pb.ActivateJobsRequest{Type: "t", MaxJobsToActivate: 1, Timeout: 1000, RequestTimeout: -1})
	if err == nil {
		_, err = stream.Recv()
	}
	if grpcCode(err) != codes.Unauthenticated {
		t.Errorf("ActivateJobs (a stream) without credentials: %v, want UNAUTHENTICATED", err)
	}
	if _, err := gw.Topology(metadata.AppendToOutgoingContext(ctx, "authorization", basic), &pb.TopologyRequest{}); err != nil {
		t.Errorf("Topology with credentials: %v", err)
	}

	rest := "http://" + s.RESTAddr().String() + "/v2/topology"
	resp, err := http.Get(rest)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var problem struct {
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}
	if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") == "" || json.Unmarshal(body, &problem) != nil || problem.Status != 401 {
		t.Errorf("GET /v2/topology without credentials: %d %q %s", resp.StatusCode, resp.Header.Get("WWW-Authenticate"), body)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, rest, nil)
	req.Header.Set("Authorization", basic)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /v2/topology with credentials: %d", resp.StatusCode)
	}

	resp, err = http.Get("http://" + s.MetricsAddr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "zeebe_") {
		t.Errorf("GET /metrics of a secured simulator: %d", resp.StatusCode)
	}
}
