package credential

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"golang.org/x/oauth2"
)

// Refresh timing. A token is fetched again when a third of its life is
// left, at most renewAhead before it expires: callers never wait for a
// token while one is due, and a token endpoint that fails for a while
// leaves time for the retries before the token runs out.
const (
	renewAhead   = 5 * time.Minute
	fetchTimeout = 10 * time.Second
	retryFirst   = time.Second
	retryMost    = 30 * time.Second
	// earlyEvery bounds the fetches a refusal asks for: a token a gateway
	// refuses for good (another audience) costs the authorization server
	// one login in this long, not one per call.
	earlyEvery = 10 * time.Second
	// recheckEvery is how often a failing login looks at its secret's
	// file: a corrected secret is used at once, not after the backoff.
	recheckEvery = time.Second
)

// refresher keeps an OAuth 2 token current in its own goroutine, which
// close stops and waits for.
type refresher struct {
	fetch func(context.Context) (*oauth2.Token, error)
	// changed says whether what fetch logs in with changed since its
	// last call (a rotated secret).
	changed func() bool
	log     *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	wake   chan struct{}
	done   chan struct{}

	mu        sync.Mutex
	tok       *oauth2.Token
	err       error         // the last fetch's, until one succeeds
	notify    chan struct{} // closed (and replaced) at each fetch's end
	lastEarly time.Time
}

func newRefresher(fetch func(context.Context) (*oauth2.Token, error), changed func() bool, log *slog.Logger) *refresher {
	r := &refresher{fetch: fetch, changed: changed, log: log, wake: make(chan struct{}, 1), done: make(chan struct{}), notify: make(chan struct{})}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	go r.run()
	return r
}

func (r *refresher) run() {
	defer close(r.done)
	retry := retryFirst
	failing := false
	for {
		ctx, cancel := context.WithTimeout(r.ctx, fetchTimeout)
		tok, err := r.fetch(ctx)
		cancel()
		if r.ctx.Err() != nil {
			return
		}
		now := time.Now()
		var wait time.Duration
		r.mu.Lock()
		if err != nil {
			r.err = err
			wait, retry = retry, min(retry*2, retryMost)
		} else {
			r.tok, r.err = tok, nil
			wait, retry = renewIn(tok, now), retryFirst
		}
		close(r.notify)
		r.notify = make(chan struct{})
		r.mu.Unlock()
		switch {
		case err != nil && !failing:
			failing = true
			r.log.Warn("credential login failed", "err", err, "retryIn", wait.String())
		case err == nil && failing:
			failing = false
			r.log.Info("credential login succeeded again", "expiresIn", expiresIn(tok, now))
		case err == nil:
			r.log.Debug("credential token refreshed", "expiresIn", expiresIn(tok, now))
		}
		if !r.sleep(wait, err != nil) {
			return
		}
	}
}

// sleep waits d, or until a refusal asks for a fetch, or (failing) until
// the secret changes; false when the refresher closes.
func (r *refresher) sleep(d time.Duration, failing bool) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	var recheck <-chan time.Time
	if failing {
		tick := time.NewTicker(recheckEvery)
		defer tick.Stop()
		recheck = tick.C
	}
	for {
		select {
		case <-r.ctx.Done():
			return false
		case <-t.C:
			return true
		case <-r.wake:
			return true
		case <-recheck:
			if r.changed() {
				return true
			}
		}
	}
}

// renewIn is how long tok may serve before the next fetch.
func renewIn(tok *oauth2.Token, now time.Time) time.Duration {
	if tok.Expiry.IsZero() {
		return 1<<63 - 1 // it never expires: fetched again only when refused
	}
	life := tok.Expiry.Sub(now)
	if life <= 0 {
		return retryFirst // expired on arrival (a clock apart): try again soon
	}
	return life - min(life/3, renewAhead)
}

func expiresIn(tok *oauth2.Token, now time.Time) string {
	if tok.Expiry.IsZero() {
		return "never"
	}
	return tok.Expiry.Sub(now).Round(time.Millisecond).String()
}

// current is a token that has not expired: at once when there is one,
// else the first fetch's (waiting at most until ctx ends), else why the
// last fetch failed.
func (r *refresher) current(ctx context.Context) (*oauth2.Token, error) {
	for {
		r.mu.Lock()
		tok, err, notify := r.tok, r.err, r.notify
		r.mu.Unlock()
		now := time.Now()
		if tok != nil && (tok.Expiry.IsZero() || now.Before(tok.Expiry)) {
			return tok, nil
		}
		if err != nil {
			if tok != nil {
				return nil, fmt.Errorf("the token expired %s ago and no new one came: %w", now.Sub(tok.Expiry).Round(time.Millisecond), err)
			}
			return nil, err
		}
		if tok != nil {
			r.fetchNow() // expired while its refresh is late (a process paused): hurry it
		}
		select {
		case <-notify:
		case <-ctx.Done():
			return nil, fmt.Errorf("no token yet: %w", ctx.Err())
		case <-r.done:
			return nil, errors.New("the credential is closed")
		}
	}
}

// early asks for a fetch now, at most once every earlyEvery.
func (r *refresher) early() {
	r.mu.Lock()
	now := time.Now()
	if now.Sub(r.lastEarly) < earlyEvery {
		r.mu.Unlock()
		return
	}
	r.lastEarly = now
	r.mu.Unlock()
	r.fetchNow()
}

// fetchNow wakes the refresher for a fetch at once.
func (r *refresher) fetchNow() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

func (r *refresher) close() {
	r.cancel()
	<-r.done
}
