// Package route is the proxy's routing core, the same under every front:
// the shard set, published whole and read without a lock (shardset.go);
// placement of new work by pool weight and power-of-two-choices (Pick,
// latency.go); each shard's in-flight limit and overload (Enter, Leave),
// cooling off after backpressure and admission by backlog and learned
// instance limit (admission.go, instances.go); active health checks and
// outlier ejection (health.go); the shard set followed from a registry
// or a configuration (membership.go, config.go); the deployment ledger's
// index and its replay to a joining shard (ledger.go). It decides where a
// call goes and keeps the books; the fronts (internal/proxy/framefront,
// internal/proxy/grpcfront) speak the protocol. Its errors carry gRPC
// status codes, which the gRPC fronts pass on as they are. It never
// imports a front, probes/, commands/, tui/ or migrate/.
package route
