package upstream

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/shardctl/shardctl/internal/h2"
)

// Pool are the frame front's HTTP/2 connections to one shard,
// opened when first needed and again after one ends; a call goes on the
// one with the fewest streams open.
type Pool struct {
	addr   string
	tls    *tls.Config // nil: plain text
	size   int
	scheme string
	h      h2.Handler

	// freed is made while someone waits for a stream to end.
	freed atomic.Pointer[chan struct{}]

	dials sync.WaitGroup // dials in the background, which Close waits for
	// stop ends the dials under way when the pool closes.
	stop   context.Context
	cancel context.CancelFunc

	mu      sync.Mutex
	conns   []*h2.Conn
	dialing int
	closed  bool
	// After a failed dial, calls fail with its error until retryAt; the
	// wait grows from dialBackoffBase to dialBackoffMax.
	dialErr error
	retryAt time.Time
	backoff time.Duration
}

// The frame front's dial backoff, as the grpc front's: a shard that came
// back is reconnected within seconds.
const (
	dialBackoffBase = 200 * time.Millisecond
	dialBackoffMax  = 5 * time.Second
)

// jitter is d ± 20%, so that shards' connections do not retry in step.
func jitter(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}

// upstreamConfig: a shard connection that goes quiet is pinged, and
// ended when the ping goes unanswered, as the grpc front's keepalive
// does: a shard that vanished without closing its connections is found
// though no call is in flight, and its connections dialled again.
var upstreamConfig = h2.Config{KeepAlive: 30 * time.Second, KeepAliveTimeout: 10 * time.Second}

// upstreamDialTimeout bounds a connection attempt: a shard that does not
// answer is found by the calls that wait for it.
const upstreamDialTimeout = 5 * time.Second

// NewPool is a pool of size HTTP/2 connections to addr, dialed when first
// used (tc nil: plain text).
func NewPool(addr string, tc *tls.Config, size int) *Pool {
	u := &Pool{addr: addr, tls: tc, size: max(size, 1), scheme: "http"}
	u.stop, u.cancel = context.WithCancel(context.Background())
	u.h = upstreamHandler{u}
	if tc != nil {
		u.tls = tc.Clone()
		u.tls.NextProtos = []string{http2.NextProtoTLS}
		if u.tls.ServerName == "" {
			u.tls.ServerName, _, _ = net.SplitHostPort(addr)
		}
		u.scheme = "https"
	}
	return u
}

// errDial wraps a failed connection attempt: the call was never sent.
type errDial struct{ err error }

func (e *errDial) Error() string { return "connection error: " + e.err.Error() }
func (e *errDial) Unwrap() error { return e.err }

// open starts a forwarded call: the request head, then body with
// END_STREAM. It does not wait for a free stream: a placement tries
// another shard instead.
func (u *Pool) Open(fields []hpack.HeaderField, body []byte, value any) (*h2.Stream, error) {
	return u.open(fields, body, value, (*h2.Conn).Request)
}

// OpenShared is Open for a call no reader's batch carries (the REST
// front's): its frames go out in one write with those of the calls
// started beside it (h2's RequestShared).
func (u *Pool) OpenShared(fields []hpack.HeaderField, body []byte, value any) (*h2.Stream, error) {
	return u.open(fields, body, value, (*h2.Conn).RequestShared)
}

func (u *Pool) open(fields []hpack.HeaderField, body []byte, value any, request func(*h2.Conn, []hpack.HeaderField, []byte, any, bool) (*h2.Stream, error)) (*h2.Stream, error) {
	for attempt := 0; ; attempt++ {
		c, err := u.conn()
		if err != nil {
			return nil, err
		}
		s, err := request(c, fields, body, value, false)
		if errors.Is(err, h2.ErrClosed) && attempt < 2 {
			continue // it ended since: another
		}
		return s, err
	}
}

// openOwn starts one of the proxy's own calls (paced: its answers are
// kept until read). Such calls may be long polls and job streams, so
// they leave a quarter of a connection's streams to forwarded calls,
// and wait, up to ctx, for a stream to end when there is no room.
func (u *Pool) OpenOwn(ctx context.Context, fields []hpack.HeaderField, body []byte, value any) (*h2.Stream, error) {
	for {
		freed := u.whenFreed()
		c, err := u.OwnConn()
		if err == nil {
			s, err := c.RequestShared(fields, body, value, true)
			if !errors.Is(err, h2.ErrClosed) && !errors.Is(err, h2.ErrFull) {
				return s, err
			}
		} else if !errors.Is(err, ErrNoRoom) {
			return nil, err
		}
		select {
		case <-freed:
		case <-c.Done():
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// ErrNoRoom: the shard's connections have no stream left for the
// proxy's own calls just now.
var ErrNoRoom = errors.New("no stream left for the proxy's own calls")

// ownConn is a connection with room for one of the proxy's own calls:
// a quarter of its streams stays free for forwarded calls. ErrNoRoom
// comes with the connection that has none.
func (u *Pool) OwnConn() (*h2.Conn, error) {
	c, err := u.conn()
	if err != nil {
		return nil, err
	}
	if c.Room() <= int(min(c.MaxStreams(), 1<<16)/4) {
		return c, ErrNoRoom
	}
	return c, nil
}

// whenFreed is closed when one of the connections' streams ends next.
func (u *Pool) whenFreed() <-chan struct{} {
	for {
		if ch := u.freed.Load(); ch != nil {
			return *ch
		}
		ch := make(chan struct{})
		if u.freed.CompareAndSwap(nil, &ch) {
			return ch
		}
	}
}

// streamEnded wakes the calls waiting for a stream. It runs at the end
// of every call, so it takes no lock while nobody waits.
func (u *Pool) streamEnded() {
	if u.freed.Load() == nil {
		return
	}
	if ch := u.freed.Swap(nil); ch != nil {
		close(*ch)
	}
}

// conn is the open connection with the fewest streams, or a new one
// while there are fewer than size.
func (u *Pool) conn() (*h2.Conn, error) {
	u.mu.Lock()
	if u.closed {
		u.mu.Unlock()
		return nil, h2.ErrClosed
	}
	var best *h2.Conn
	bestN, usable := 0, 0
	live := u.conns[:0]
	for _, c := range u.conns {
		select {
		case <-c.Done():
			continue
		default:
		}
		live = append(live, c) // one going away still ends its calls
		if !c.Usable() {
			continue
		}
		usable++
		if n := c.Streams(); best == nil || n < bestN {
			best, bestN = c, n
		}
	}
	u.conns = live
	if best != nil && (bestN == 0 || usable+u.dialing >= u.size) {
		u.mu.Unlock()
		return best, nil
	}
	if now := time.Now(); now.Before(u.retryAt) {
		// The last dial failed a moment ago: fail fast with its error, as
		// grpc-go does while it backs off, rather than dial per call.
		err := u.dialErr
		u.mu.Unlock()
		if best != nil {
			return best, nil
		}
		return nil, &errDial{err}
	}
	u.dialing++
	if best != nil {
		// One more for the load: dialled in the background, so that the
		// caller (often a client connection's reader) does not wait up
		// to upstreamDialTimeout for it; this call takes the best now.
		u.dials.Add(1)
		u.mu.Unlock()
		go func() {
			defer u.dials.Done()
			_, _ = u.dialed(u.dial())
		}()
		return best, nil
	}
	u.mu.Unlock()
	return u.dialed(u.dial())
}

// dialed takes a dial's result into the pool.
func (u *Pool) dialed(c *h2.Conn, err error) (*h2.Conn, error) {
	u.mu.Lock()
	u.dialing--
	closed := u.closed
	if err == nil && !closed {
		u.conns = append(u.conns, c)
	}
	if err != nil {
		u.backoff = min(max(time.Duration(float64(u.backoff)*1.6), dialBackoffBase), dialBackoffMax)
		u.dialErr, u.retryAt = err, time.Now().Add(jitter(u.backoff))
	} else {
		u.backoff, u.retryAt = 0, time.Time{}
	}
	u.mu.Unlock()
	switch {
	case err != nil:
		return nil, &errDial{err}
	case closed:
		c.Close()
		return nil, h2.ErrClosed
	}
	return c, nil
}

func (u *Pool) dial() (*h2.Conn, error) {
	ctx, cancel := context.WithTimeout(u.stop, upstreamDialTimeout)
	defer cancel()
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", u.addr)
	if err != nil {
		return nil, err
	}
	if tcp, ok := nc.(*net.TCPConn); ok {
		_ = tcp.SetNoDelay(true)
	}
	if u.tls != nil {
		tc := tls.Client(nc, u.tls)
		if err := tc.HandshakeContext(ctx); err != nil {
			nc.Close()
			return nil, err
		}
		if p := tc.ConnectionState().NegotiatedProtocol; p != http2.NextProtoTLS {
			tc.Close()
			return nil, fmt.Errorf("the shard at %s does not speak HTTP/2 over TLS (ALPN %q)", u.addr, p)
		}
		nc = tc
	}
	return h2.Client(nc, upstreamConfig, u.h), nil
}

// close ends every connection and waits for them.
func (u *Pool) Close() {
	u.mu.Lock()
	u.closed = true
	conns := u.conns
	u.conns = nil
	u.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
	u.cancel()
	u.dials.Wait() // a dial that ends now closes its connection
}
