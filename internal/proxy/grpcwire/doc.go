// Package grpcwire is the gRPC wire format as the proxy's frame front and
// its upstream connections speak it over internal/h2: request timeouts,
// status trailers and grpc-message escaping, the length prefix of a
// message, the largest message taken. It imports nothing of this module
// but internal/h2.
package grpcwire
