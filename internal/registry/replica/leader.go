package replica

import (
	"context"
	"errors"
	"fmt"

	"github.com/shardctl/shardctl/internal/registry/registryapi"
)

// A write etcd's member forwards to a leader that dies with it is lost
// without a word: nothing answers it until EtcdTimeout. Every client
// connection held by such a write is held those five seconds, and a
// client with a pool of them (a Eureka client's, the failover test's)
// reaches nothing on this replica until they end, however soon the
// members elect the next leader. So a replica told when its member sees
// a new leader (Options.LeaderChanged) answers the writes it has in
// flight then at once, as unavailable: they may or may not have landed,
// as after a timeout, and the client sends them again.

// term is one leader's time as this replica's member saw it: done when
// the member sees the next.
type term struct {
	ctx    context.Context
	cancel context.CancelFunc
}

func newTerm() *term {
	ctx, cancel := context.WithCancel(context.Background())
	return &term{ctx: ctx, cancel: cancel}
}

// errLeaderChanged is the cause a write in flight is cancelled with when
// the leader changes.
var errLeaderChanged = errors.New("etcd's leader changed while the write was in flight")

// leaderLoop follows the member's leader changes until close, ending
// the term of the writes in flight at each.
func (p *Replica) leaderLoop() {
	defer p.wg.Done()
	for {
		changed := p.opts.LeaderChanged()
		select {
		case <-p.ctx.Done():
			return
		case <-changed:
		}
		// Counted before they are cancelled: each stops counting itself
		// as soon as it is.
		inFlight := p.commitsInFlight.Load()
		p.term.Swap(newTerm()).cancel()
		p.opts.Logger.Info("etcd leader changed", "replica", p.opts.ID, "commitsInFlight", inFlight)
	}
}

// inTerm is ctx, also cancelled when the leader changes; stop releases
// it and says whether the leader changed meanwhile.
func (p *Replica) inTerm(ctx context.Context) (_ context.Context, stop func() (changed bool)) {
	tctx, cancel := context.WithCancelCause(ctx)
	after := context.AfterFunc(p.term.Load().ctx, func() { cancel(errLeaderChanged) })
	p.commitsInFlight.Add(1)
	return tctx, func() bool {
		p.commitsInFlight.Add(-1)
		after()
		changed := errors.Is(context.Cause(tctx), errLeaderChanged)
		cancel(nil)
		return changed
	}
}

// lostWithLeader is what a write cancelled by a leader change answers.
func lostWithLeader() error {
	return fmt.Errorf("%w: %w: a write forwarded to a leader that died is lost unanswered, so it may or may not have landed; send it again", registryapi.ErrUnavailable, errLeaderChanged)
}
