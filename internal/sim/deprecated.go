//lint:file-ignore SA1019 DeployProcess is deprecated in Zeebe but part of the gateway API the simulator serves

package sim

import (
	"context"

	pb "github.com/shardctl/shardctl/internal/gatewaypb"
)

// DeployProcess is deprecated in Zeebe but still served: old clients use it.

func (g *gateway) DeployProcess(ctx context.Context, req *pb.DeployProcessRequest) (*pb.DeployProcessResponse, error) {
	resources := make([]*pb.Resource, len(req.GetProcesses()))
	for i, p := range req.GetProcesses() {
		resources[i] = &pb.Resource{Name: p.GetName(), Content: p.GetDefinition()}
	}
	key, procs, err := g.deploy(ctx, resources)
	if err != nil {
		return nil, err
	}
	resp := &pb.DeployProcessResponse{Key: key}
	for _, p := range procs {
		resp.Processes = append(resp.Processes, p.metadata())
	}
	return resp, nil
}
