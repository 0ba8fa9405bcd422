// Package pbkeys finds and rewrites the keys in the gateway API's
// protobuf messages: int64 fields named "key" or ending in "Key", at any
// depth, decoded (Rewrite, Stamp) or straight on the wire (RewriteWire),
// so a gRPC front can stamp a shard's slot into every key it returns and
// take it out of every key it receives (internal/keyslot). It imports
// nothing of the proxy.
package pbkeys
