// Package physicaltenant is what a physical tenant (Zeebe 8.10) is to the
// federation: the name a request is for, the list of names a shard serves,
// and which shard serves which request. A physical tenant is a separate
// engine inside one Camunda cluster, picked by the Camunda-Physical-Tenant
// header over gRPC and the /physical-tenants/{id} path prefix over REST; a
// request that names none is for "default", and so is every request to a
// release before 8.10. It imports nothing of this module.
package physicaltenant

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/grpc/metadata"
)

// Header is the gRPC metadata (HTTP/2 header) that names a request's
// physical tenant, lower-case as it travels.
const Header = "camunda-physical-tenant"

// PathPrefix opens a REST path for a physical tenant:
// /physical-tenants/{id}/v2/….
const PathPrefix = "/physical-tenants/"

// MetricLabel labels 8.10's partition metrics with their physical tenant.
const MetricLabel = "physicalTenantId"

// Sent is the physical tenant a call's incoming gRPC metadata names (the
// REST front puts a path's there too), "" for none.
func Sent(ctx context.Context) string {
	if v := metadata.ValueFromIncomingContext(ctx, Header); len(v) > 0 {
		return v[0]
	}
	return ""
}

// Default is the physical tenant of a request that names none, and the
// only one a shard registered without a list serves.
const Default = "default"

// Of is the physical tenant a request is for: the name it sent, or Default.
func Of(sent string) string {
	if sent == "" {
		return Default
	}
	return sent
}

// Serves reports whether a shard serving list (nil: Default only) serves
// the request's tenant (sent as the client sent it, "" for none).
func Serves(list []string, sent string) bool {
	t := Of(sent)
	if len(list) == 0 {
		return t == Default
	}
	return slices.Contains(list, t)
}

// Parse reads a list as flags and registry metadata write it:
// comma-separated names ("" : nil, Default only). Names are checked as
// Camunda checks tenant ids: letters, digits and ._- , at most 31 long.
func Parse(s string) ([]string, error) {
	if s == "" {
		return nil, nil
	}
	var out []string
	for _, name := range strings.Split(s, ",") {
		if err := Check(name); err != nil {
			return nil, err
		}
		if !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	return out, nil
}

// Check says what is wrong with a physical tenant's name, if anything.
func Check(name string) error {
	if name == "" || len(name) > 31 {
		return fmt.Errorf("physical tenant %q: want 1 to 31 characters", name)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.') {
			return fmt.Errorf("physical tenant %q: want letters, digits, '_', '-' or '.'", name)
		}
	}
	return nil
}

// Format writes a list as Parse reads it.
func Format(list []string) string { return strings.Join(list, ",") }

// Describe is a list as an error message names it.
func Describe(list []string) string {
	if len(list) == 0 {
		return Default
	}
	return Format(list)
}
