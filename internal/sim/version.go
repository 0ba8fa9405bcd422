package sim

import (
	"fmt"
	"strings"

	"github.com/google/uuid"
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

// physicalTenants: 8.10 labels partition metrics with the physical
// tenant (the simulator serves one, "default").
func (v Version) physicalTenants() bool { return v.atLeast(10) }

// conditionals: EvaluateConditional (8.9).
func (v Version) conditionals() bool { return v.atLeast(9) }

// businessIDs and physical tenants (8.10).
func (v Version) businessIDs() bool { return v.atLeast(10) }

// defaultPhysicalTenant is the physical tenant a request without one is
// for (8.10), the only one the simulator serves.
const defaultPhysicalTenant = "default"

// newClusterID is a cluster's id as Zeebe makes one: a random UUID.
func newClusterID() string { return uuid.NewString() }
