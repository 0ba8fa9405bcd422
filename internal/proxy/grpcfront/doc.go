// Package grpcfront is the proxy's gRPC front as grpc-go handlers: every
// RPC of the Zeebe 8.5 gateway API turned into calls on the routing core
// (internal/proxy/route) — a new instance placed by power-of-two-choices
// with explicit backpressure, a key-addressed call to its key's shard,
// deployments to every shard and the ledger, messages and signals fanned
// out, jobs collected from every shard that holds work and handed back
// when no worker can take them. It is the front with --front=grpc, and
// the frame front's fallback for what it does not forward as frames. It
// never imports probes/, commands/, tui/ or migrate/.
package grpcfront
