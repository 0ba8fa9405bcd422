//lint:file-ignore SA1019 DeployProcess is deprecated in Zeebe but part of the gateway API the proxy serves

package grpcfront

import (
	"context"

	pb "github.com/shardctl/shardctl/internal/gatewaypb"
	"github.com/shardctl/shardctl/internal/ledger"
)

// DeployProcess is deprecated in Zeebe but still served: old clients use it.

func (sv *Server) DeployProcess(ctx context.Context, req *pb.DeployProcessRequest) (*pb.DeployProcessResponse, error) {
	resources := make([]ledger.Resource, len(req.GetProcesses()))
	for i, r := range req.GetProcesses() {
		resources[i] = ledger.Resource{Name: r.GetName(), Content: r.GetDefinition()}
	}
	return deployAll(ctx, sv, "DeployProcess", resources,
		func(ctx context.Context, c pb.GatewayClient) (*pb.DeployProcessResponse, error) {
			return c.DeployProcess(ctx, req)
		},
		func(r *pb.DeployProcessResponse) []*pb.ProcessMetadata { return r.GetProcesses() })
}
