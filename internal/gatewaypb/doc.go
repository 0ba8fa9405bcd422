// Package gatewaypb is the Zeebe gateway's gRPC API as Camunda 8.10
// serves it, generated from gateway.proto (gen.sh): the messages and the
// Gateway service that the simulator, the proxy and the REST front speak.
// The Zeebe Go client (8.5, the newest Go client there is) speaks a
// subset of it on the same wire: every 8.5 message, field and method is
// here with its number and type (compat_test.go holds that), and what
// came later — operationReference, tags, businessId, job results, user
// task properties, the cluster id, the INACTIVE role and DEAD health,
// EvaluateConditional — is here too, so that it is read, kept and
// forwarded rather than dropped as unknown.
//
// The proto package is shardctl.gateway rather than gateway_protocol so
// that these types register beside the Go client's in one binary; the
// service's wire name stays gateway_protocol.Gateway, which is what
// clients dial. Regenerate with internal/gatewaypb/gen.sh.
package gatewaypb
