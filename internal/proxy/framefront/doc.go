// Package framefront is the proxy's default front (--front=frames): it
// speaks HTTP/2 itself over internal/h2, and a call that goes to one
// shard and needs only its keys rewritten is forwarded as frames,
// rewritten on the wire (framecall.go); job activations relay the
// shards' batches as they come (framejobs.go). Every other call runs on
// the gRPC front's handlers in-process (framelocal.go), and anything else
// is handed to grpc-go (framepass.go). Routing is the core's
// (internal/proxy/route). It never imports probes/, commands/, tui/ or
// migrate/.
package framefront
