package sim

import (
	"context"
	"fmt"
	"strings"

	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/shardctl/shardctl/internal/gatewaypb"
	"github.com/shardctl/shardctl/internal/physicaltenant"
)

// A Version is the Zeebe release the simulator plays: its gateway
// version, the gRPC fields and methods it knows, and (with the metric
// names) what its /metrics exports. Three are played: the oldest that
// shardctl federates (8.5) and the two ends of the supported range.
type Version struct {
	minor   int
	release string // the gateway and broker version Topology reports
}

// Versions the simulator plays, oldest first; the newest is the default.
var Versions = []Version{{5, "8.5.20"}, {8, "8.8.0"}, {10, "8.10.0"}}

// DefaultVersion is the newest.
var DefaultVersion = Versions[len(Versions)-1]

// ParseVersion reads "8.5", "8.8" or "8.10" (a patch release of one,
// "8.8.3", plays that minor version).
func ParseVersion(s string) (Version, error) {
	for _, v := range Versions {
		if s == v.String() || strings.HasPrefix(s, v.String()+".") {
			return v, nil
		}
	}
	return Version{}, fmt.Errorf("the simulator plays Zeebe %s, not %q", VersionNames(), s)
}

// VersionNames lists the versions played, as flags take them.
func VersionNames() string {
	names := make([]string, len(Versions))
	for i, v := range Versions {
		names[i] = v.String()
	}
	return strings.Join(names, ", ")
}

func (v Version) String() string { return fmt.Sprintf("8.%d", v.minor) }

// Release is the gateway version Topology reports.
func (v Version) Release() string { return v.release }

// What came after 8.5, by the release that brought it.
func (v Version) atLeast(minor int) bool { return v.minor >= minor }

// instanceTags: CreateProcessInstance's tags, kept on the instance and
// its jobs (8.8); a cluster id in Topology (8.8).
func (v Version) instanceTags() bool { return v.atLeast(8) }
func (v Version) clusterID() bool    { return v.atLeast(8) }

// micrometer: the metric names of 8.6 and later (Micrometer): timers
// in _seconds, a gauge's _total dropped, flow control.
func (v Version) micrometer() bool { return v.atLeast(6) }

// physicalTenants: 8.10 serves physical tenants and labels partition
// metrics with one.
func (v Version) physicalTenants() bool { return v.atLeast(10) }

// conditionals: EvaluateConditional (8.9).
func (v Version) conditionals() bool { return v.atLeast(9) }

// businessIDs: a creation's business id (8.10).
func (v Version) businessIDs() bool { return v.atLeast(10) }

// physicalTenant is the physical tenant a call is for ("": default); a
// release before 8.10 knows none and ignores the header.
func (c *cluster) physicalTenant(ctx context.Context) string {
	if !c.cfg.Version.physicalTenants() {
		return ""
	}
	return physicaltenant.Sent(ctx)
}

// checkPhysicalTenant refuses a call for a physical tenant the cluster
// does not serve, as NOT_FOUND naming it and those it serves.
func (c *cluster) checkPhysicalTenant(ctx context.Context) error {
	return c.servesPhysicalTenant(c.physicalTenant(ctx))
}

func (c *cluster) servesPhysicalTenant(tenant string) error {
	if physicaltenant.Serves(c.cfg.PhysicalTenants, tenant) {
		return nil
	}
	return status.Errorf(codes.NotFound, "Expected to find physical tenant '%s', but this cluster serves only %s", tenant, physicaltenant.Describe(c.cfg.PhysicalTenants))
}

// restPhysicalTenant checks a REST request's /physical-tenants/{id}
// prefix: a release before 8.10 has no such path.
func (c *cluster) restPhysicalTenant(tenant string) error {
	if !c.cfg.Version.physicalTenants() {
		return status.Errorf(codes.NotFound, "No endpoint under /physical-tenants/%s: Zeebe %s serves no physical tenants", tenant, c.cfg.Version)
	}
	return c.servesPhysicalTenant(tenant)
}

// physicalTenantInterceptors refuse gRPC calls for a physical tenant the
// cluster does not serve before any handler runs. Topology is the
// cluster's, whatever tenant asks.
func (c *cluster) physicalTenantInterceptors() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
			if _, ok := req.(*pb.TopologyRequest); ok {
				return next(ctx, req)
			}
			if err := c.checkPhysicalTenant(ctx); err != nil {
				return nil, err
			}
			return next(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, next grpc.StreamHandler) error {
			if err := c.checkPhysicalTenant(ss.Context()); err != nil {
				return err
			}
			return next(srv, ss)
		}),
	}
}

// newClusterID is a cluster's id as Zeebe makes one: a random UUID.
func newClusterID() string { return uuid.NewString() }
