package framefront

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shardctl/shardctl/internal/proxy/grpcfront"
	"github.com/shardctl/shardctl/internal/proxy/grpcwire"
)

// fastByRPC are fastMethods by their method's name, for Unary.
var fastByRPC = func() map[string]*fastMethod {
	out := make(map[string]*fastMethod, len(fastMethods))
	for _, m := range fastMethods {
		out[m.rpc] = m
	}
	return out
}()

// unaryAnswer is the answer of a call of Unary's.
type unaryAnswer struct {
	resp []byte // framed
	err  error
}

// Unary forwards one call of a front that is not a gRPC client's (the
// REST API's) as the frame front forwards a client's: routed by its key
// or placed by the same pools, weights, limits and admission, retried on
// the next shard as a client's call is, its answer stamped with the
// shard's slot, counted in the same metrics. So a REST call that stands
// for a gateway RPC takes the gRPC path without a protobuf message in Go
// and a client of grpc-go's between. rpc is the gateway method's name
// (one the frame front forwards itself, else it is Unimplemented), msg
// the request message and the answer the response message; auth and
// tenant, when set, reach the shard as the gRPC metadata a client sends.
// When ctx ends first, the call is abandoned (its stream to the shard
// reset) and the answer is ctx's status.
func Unary(ctx context.Context, p *grpcfront.Server, rpc string, msg []byte, auth, tenant string) ([]byte, error) {
	m := fastByRPC[rpc]
	if m == nil {
		return nil, status.Errorf(codes.Unimplemented, "the proxy forwards no method %s", rpc)
	}
	req := requestHead{path: m.path, auth: auth, tenant: tenant}
	if d, ok := ctx.Deadline(); ok {
		req.timeout, req.hasTimeout = time.Until(d), true
	}
	c := newFastCall(p, nil, m, &req)
	c.answered = make(chan unaryAnswer, 1)
	c.route(msg)
	select {
	case a := <-c.answered:
		return a.message()
	case <-ctx.Done():
		c.clientGone()
		select {
		case a := <-c.answered: // answered meanwhile: the answer stands
			return a.message()
		default:
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
}

func (a unaryAnswer) message() ([]byte, error) {
	if a.err != nil {
		return nil, a.err
	}
	return grpcwire.OneMessage(a.resp)
}
