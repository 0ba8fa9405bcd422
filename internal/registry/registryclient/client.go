// Package registryclient is the registry's HTTP client: Eureka's API for
// registration and heartbeats, shardctl's for shards, cutover records,
// the watch and the deployment ledger. It links no registry runtime, only
// the API types of internal/registry/registryapi.
// It links no runtime (internal/architecture checks).
package registryclient

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/shardctl/shardctl/internal/certs"
	"github.com/shardctl/shardctl/internal/ledger"
	"github.com/shardctl/shardctl/internal/registry/registryapi"
)

// Client talks to a registry: Eureka's API for registration and
// heartbeats, shardctl's for shards, watch and the ledger.
type Client struct {
	// Base is the registry's Eureka URL, e.g. http://127.0.0.1:8761/eureka;
	// shardctl's own API lives beside it at the same host.
	Base  *url.URL
	Token string
	HTTP  *http.Client
	// WatchSilence: a watch stream that brings nothing for this long,
	// not even the keep-alive the registry sends every 15 s, is taken
	// for a half-open connection and dialled again (0: 45 s).
	WatchSilence time.Duration
	// withCert: UseTLS gave a client certificate.
	withCert bool
}

const defaultWatchSilence = 45 * time.Second

// errSilent ends a watch stream that was silent for too long.
var errSilent = errors.New("registry watch: silent too long")

// New parses the registry URL as users give it (--registry).
func New(base, token string) (*Client, error) {
	u, err := url.Parse(strings.TrimRight(base, "/"))
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("registry URL %q: want http(s)://HOST:PORT[/eureka]", base)
	}
	if u.Path == "" {
		u.Path = "/eureka"
	}
	return &Client{Base: u, Token: token, HTTP: &http.Client{Timeout: 10 * time.Second}}, nil
}

// UseTLS makes the client's calls with tc (an https registry's CA, a
// client certificate): the registry's API and its watch alike.
func (c *Client) UseTLS(tc *tls.Config) {
	c.HTTP.Transport = certs.Transport(tc)
	c.withCert = tc != nil && (len(tc.Certificates) > 0 || tc.GetClientCertificate != nil)
}

// HTTPError is an answer other than the one expected.
type HTTPError struct {
	Method, URL string
	Code        int
	Body        string
}

func (e *HTTPError) Error() string {
	msg := strings.TrimSpace(e.Body)
	if msg == "" {
		msg = http.StatusText(e.Code)
	}
	return fmt.Sprintf("registry: %s (HTTP %d from %s %s)", msg, e.Code, e.Method, e.URL)
}

// Is lets errors.Is see the registry's 404 as ErrNotFound, its 409 as
// ErrConflict and its 423 as ErrLeased, as they are on the server.
func (e *HTTPError) Is(target error) bool {
	switch target {
	case registryapi.ErrNotFound:
		return e.Code == http.StatusNotFound
	case registryapi.ErrConflict:
		return e.Code == http.StatusConflict
	case registryapi.ErrLeased:
		return e.Code == http.StatusLocked
	}
	return false
}

// IsNotFound says whether err is a 404 from the registry.
func IsNotFound(err error) bool {
	var he *HTTPError
	return errors.As(err, &he) && he.Code == http.StatusNotFound
}

func (c *Client) eureka(path string) string {
	u := *c.Base
	u.Path = strings.TrimRight(u.Path, "/") + path
	return u.String()
}

func (c *Client) own(path string, q url.Values) string {
	u := *c.Base
	u.Path = path
	u.RawQuery = q.Encode()
	return u.String()
}

func (c *Client) do(ctx context.Context, method, u string, body []byte, contentType string, want int, out any) error {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return c.unreachable(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, registryapi.MaxLedgerBody))
	if err != nil {
		return fmt.Errorf("registry: %s %s: %w", method, u, err)
	}
	if resp.StatusCode != want {
		return &HTTPError{Method: method, URL: u, Code: resp.StatusCode, Body: string(b)}
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("registry: %s %s: malformed answer: %w", method, u, err)
		}
	}
	return nil
}

// unreachable names the registry and the cause, not Go's request dump.
func (c *Client) unreachable(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	if c.Base.Scheme == "https" && !c.withCert && closedByPeer(err) {
		// A registry that asks for a client certificate and gets none
		// refuses it after the handshake, by an alert the client may
		// never read: its request, written after the server closed,
		// meets a reset instead.
		return fmt.Errorf("registry %s closed the connection: %w; it may ask for a client certificate (--registry-cert and --registry-key, or SHARDCTL_REGISTRY_CERT and SHARDCTL_REGISTRY_KEY)", c.Base, err)
	}
	return fmt.Errorf("registry %s is unreachable: %w (set --registry or SHARDCTL_REGISTRY)", c.Base, err)
}

// closedByPeer says whether err is the other end closing or resetting
// the connection.
func closedByPeer(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// Register registers an instance through Eureka's API.
func (c *Client) Register(ctx context.Context, in *registryapi.Instance) error {
	body := registryapi.EncodeInstanceJSON(in)
	return c.do(ctx, http.MethodPost, c.eureka("/apps/"+url.PathEscape(in.App)), body, "application/json", http.StatusNoContent, nil)
}

// Renew sends one heartbeat.
func (c *Client) Renew(ctx context.Context, app, id string) error {
	return c.do(ctx, http.MethodPut, c.eureka("/apps/"+url.PathEscape(app)+"/"+url.PathEscape(id)), nil, "", http.StatusOK, nil)
}

// Cancel deregisters an instance through Eureka's API.
func (c *Client) Cancel(ctx context.Context, app, id string) error {
	return c.do(ctx, http.MethodDelete, c.eureka("/apps/"+url.PathEscape(app)+"/"+url.PathEscape(id)), nil, "", http.StatusOK, nil)
}

// Heartbeat registers in and renews its lease every renewal interval
// until ctx ends, registering again whenever the registry no longer knows
// it (a 404, e.g. after an eviction or a restart with a memory store); on
// the way out it deregisters. Errors go to report and are retried; each
// registration that succeeds is reported as a nil error.
func (c *Client) Heartbeat(ctx context.Context, in *registryapi.Instance, report func(error)) {
	if report == nil {
		report = func(error) {}
	}
	every := time.Duration(max(in.LeaseInfo.RenewalIntervalInSecs, 1)) * time.Second
	registered := false
	for {
		var err error
		if !registered {
			err = c.Register(ctx, in)
			registered = err == nil
			if registered {
				report(nil)
			}
		} else if err = c.Renew(ctx, in.App, in.InstanceID); IsNotFound(err) {
			registered = false
			if err = c.Register(ctx, in); err == nil {
				registered = true
				report(nil)
			}
		}
		if err != nil && ctx.Err() == nil {
			report(err)
		}
		wait := every
		if !registered {
			wait = min(every, time.Second)
		}
		select {
		case <-ctx.Done():
			if registered {
				stop, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				_ = c.Cancel(stop, in.App, in.InstanceID)
				cancel()
			}
			return
		case <-time.After(wait):
		}
	}
}

// Shards lists the shards of app ("" for the registry's shards app).
func (c *Client) Shards(ctx context.Context, app string) ([]registryapi.Shard, error) {
	var out struct {
		Shards []registryapi.Shard `json:"shards"`
	}
	err := c.do(ctx, http.MethodGet, c.own("/shardctl/v1/shards", appQuery(app)), nil, "", http.StatusOK, &out)
	return out.Shards, err
}

// Shard returns one shard.
func (c *Client) Shard(ctx context.Context, app, id string) (registryapi.Shard, error) {
	var s registryapi.Shard
	err := c.do(ctx, http.MethodGet, c.own("/shardctl/v1/shards/"+url.PathEscape(id), appQuery(app)), nil, "", http.StatusOK, &s)
	return s, err
}

// SetState sets a shard's state (UP, DRAINING, OUT_OF_SERVICE, DOWN).
func (c *Client) SetState(ctx context.Context, app, id, state string) (registryapi.Shard, error) {
	q := appQuery(app)
	q.Set("value", state)
	var s registryapi.Shard
	err := c.do(ctx, http.MethodPut, c.own("/shardctl/v1/shards/"+url.PathEscape(id)+"/state", q), nil, "", http.StatusOK, &s)
	return s, err
}

// Deregister removes a shard; releaseSlot also frees its slot.
func (c *Client) Deregister(ctx context.Context, app, id string, releaseSlot bool) error {
	q := appQuery(app)
	if releaseSlot {
		q.Set("release-slot", "true")
	}
	return c.do(ctx, http.MethodDelete, c.own("/shardctl/v1/shards/"+url.PathEscape(id), q), nil, "", http.StatusNoContent, nil)
}

// Status returns the registry's own state.
func (c *Client) Status(ctx context.Context) (registryapi.Health, error) {
	var h registryapi.Health
	err := c.do(ctx, http.MethodGet, c.own("/shardctl/v1/status", nil), nil, "", http.StatusOK, &h)
	return h, err
}

func appQuery(app string) url.Values {
	q := url.Values{}
	if app != "" {
		q.Set("app", app)
	}
	return q
}

// Cutovers lists the cutover records of app ("" for every app).
func (c *Client) Cutovers(ctx context.Context, app string) ([]registryapi.Cutover, error) {
	var out struct {
		Cutovers []registryapi.Cutover `json:"cutovers"`
	}
	err := c.do(ctx, http.MethodGet, c.own("/shardctl/v1/cutovers", appQuery(app)), nil, "", http.StatusOK, &out)
	return out.Cutovers, err
}

// Cutover reads one record.
func (c *Client) Cutover(ctx context.Context, name string) (registryapi.Cutover, error) {
	var out registryapi.Cutover
	err := c.do(ctx, http.MethodGet, c.own("/shardctl/v1/cutovers/"+url.PathEscape(name), nil), nil, "", http.StatusOK, &out)
	return out, err
}

// PutCutover writes a record (Registry.PutCutover's rules) and returns it
// as stored.
func (c *Client) PutCutover(ctx context.Context, cut registryapi.Cutover) (registryapi.Cutover, error) {
	body, err := json.Marshal(cut)
	if err != nil {
		return registryapi.Cutover{}, err
	}
	var out registryapi.Cutover
	err = c.do(ctx, http.MethodPut, c.own("/shardctl/v1/cutovers/"+url.PathEscape(cut.Name), nil), body, "application/json", http.StatusOK, &out)
	return out, err
}

// LeaseCutover takes or renews the lease of a record for ttl, taking it
// from replace if that is who holds it (Registry.LeaseCutover).
func (c *Client) LeaseCutover(ctx context.Context, name, holder string, ttl time.Duration, replace string) (registryapi.Cutover, error) {
	q := url.Values{"holder": {holder}, "ttl": {ttl.String()}}
	if replace != "" {
		q.Set("replace", replace)
	}
	var out registryapi.Cutover
	err := c.do(ctx, http.MethodPost, c.own("/shardctl/v1/cutovers/"+url.PathEscape(name)+"/lease", q), nil, "", http.StatusOK, &out)
	return out, err
}

// ReleaseCutover ends holder's lease of a record.
func (c *Client) ReleaseCutover(ctx context.Context, name, holder string) error {
	q := url.Values{"holder": {holder}}
	return c.do(ctx, http.MethodDelete, c.own("/shardctl/v1/cutovers/"+url.PathEscape(name)+"/lease", q), nil, "", http.StatusNoContent, nil)
}

// Deployments reads the deployment ledger.
func (c *Client) Deployments(ctx context.Context) ([]ledger.Deployment, error) {
	return Ledger{C: c}.All(ctx)
}

// Watcher receives what Watch sees; any field may be nil.
type Watcher struct {
	// Shards gets the whole set of shards first, and again after every
	// change.
	Shards func(version uint64, shards []registryapi.Shard)
	// Ledger is told that deployment seq was appended or updated; 0 means
	// changes may have been missed: read it all again.
	Ledger func(seq int)
	// Cutovers gets every cutover record of the app first, and again
	// after every change of one.
	Cutovers func(cutovers []registryapi.Cutover)
	// Error gets the errors of broken streams, which are reopened.
	Error func(error)
	// Connected is told each time a stream is open (the registry
	// answered), before its first event.
	Connected func()
}

// Watch follows the shards of app until ctx ends. A broken stream is
// reopened from the last version seen, with backoff.
func (c *Client) Watch(ctx context.Context, app string, w Watcher) {
	shards := map[string]registryapi.Shard{}
	cutovers := map[string]registryapi.Cutover{}
	tellCutovers := func() {
		if w.Cutovers != nil {
			list := make([]registryapi.Cutover, 0, len(cutovers))
			for _, name := range slices.Sorted(maps.Keys(cutovers)) {
				list = append(list, cutovers[name])
			}
			w.Cutovers(list)
		}
	}
	var since uint64
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := c.stream(ctx, app, &since, w.Connected, func(e registryapi.WatchEvent) {
			backoff = 100 * time.Millisecond
			switch {
			case e.Action == registryapi.ActionLedger:
				if w.Ledger != nil {
					w.Ledger(e.Ledger)
				}
				return
			case e.Action == registryapi.ActionCutover && e.Cutover != nil:
				cutovers[e.Cutover.Name] = *e.Cutover
				tellCutovers()
				return
			}
			switch {
			case e.Reset:
				// Changes were missed, the ledger's maybe too.
				if w.Ledger != nil {
					w.Ledger(0)
				}
				shards = map[string]registryapi.Shard{}
				for _, s := range e.Shards {
					shards[s.ID] = s
				}
				cutovers = map[string]registryapi.Cutover{}
				for _, cut := range e.Cutovers {
					cutovers[cut.Name] = cut
				}
				tellCutovers()
			case e.Action == registryapi.ActionDeleted:
				delete(shards, e.Shard.ID)
			case e.Shard != nil:
				shards[e.Shard.ID] = *e.Shard
			}
			list := make([]registryapi.Shard, 0, len(shards))
			for _, s := range shards {
				list = append(list, s)
			}
			if w.Shards != nil {
				w.Shards(e.Version, list)
			}
		})
		if ctx.Err() != nil {
			return
		}
		if w.Error != nil && err != nil {
			w.Error(err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

// stream reads one server-sent-events watch until it breaks.
func (c *Client) stream(ctx context.Context, app string, since *uint64, connected func(), on func(registryapi.WatchEvent)) error {
	q := appQuery(app)
	q.Set("since", strconv.FormatUint(*since, 10))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.own("/shardctl/v1/watch", q), nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "text/event-stream")
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	// No client timeout: the stream is long-lived. It ends with ctx,
	// or when it has been silent too long.
	silence := c.WatchSilence
	if silence <= 0 {
		silence = defaultWatchSilence
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	req = req.WithContext(ctx)
	watchdog := time.AfterFunc(silence, func() { cancel(errSilent) })
	defer watchdog.Stop()
	silent := func() bool { return errors.Is(context.Cause(ctx), errSilent) }
	resp, err := (&http.Client{Transport: c.HTTP.Transport}).Do(req)
	if err != nil {
		if silent() {
			return fmt.Errorf("registry watch: no answer within %v", silence)
		}
		return c.unreachable(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return &HTTPError{Method: http.MethodGet, URL: req.URL.String(), Code: resp.StatusCode, Body: string(b)}
	}
	if connected != nil {
		connected()
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var data []byte
	for sc.Scan() {
		watchdog.Reset(silence)
		line := sc.Bytes()
		switch {
		case len(line) == 0:
			if len(data) > 0 {
				var e registryapi.WatchEvent
				if err := json.Unmarshal(data, &e); err != nil {
					return fmt.Errorf("registry watch: malformed event: %w", err)
				}
				*since = e.Version
				on(e)
			}
			data = data[:0]
		case bytes.HasPrefix(line, []byte("data:")):
			data = append(data, bytes.TrimSpace(line[5:])...)
		}
	}
	if silent() {
		return fmt.Errorf("registry watch: nothing heard for %v, not even a keep-alive: the connection is taken for dead", silence)
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("registry watch: %w", err)
	}
	return errors.New("registry watch: the stream ended")
}

// Ledger is the registry's deployment ledger, as the proxy's Ledger.
type Ledger struct{ C *Client }

var _ ledger.Ledger = Ledger{}

func (l Ledger) Append(ctx context.Context, d ledger.Deployment) (ledger.Deployment, error) {
	body, err := json.Marshal(d)
	if err != nil {
		return ledger.Deployment{}, err
	}
	var out ledger.Deployment
	err = l.C.do(ctx, http.MethodPost, l.C.own("/shardctl/v1/ledger", nil), body, "application/json", http.StatusCreated, &out)
	return out, err
}

func (l Ledger) SetKeys(ctx context.Context, seq int, shardID string, keys map[string]int64) error {
	body, err := json.Marshal(keys)
	if err != nil {
		return err
	}
	return l.C.do(ctx, http.MethodPut, l.C.own(fmt.Sprintf("/shardctl/v1/ledger/%d/keys/%s", seq, url.PathEscape(shardID)), nil), body, "application/json", http.StatusNoContent, nil)
}

func (l Ledger) All(ctx context.Context) ([]ledger.Deployment, error) {
	var out struct {
		Deployments []ledger.Deployment `json:"deployments"`
	}
	err := l.C.do(ctx, http.MethodGet, l.C.own("/shardctl/v1/ledger", nil), nil, "", http.StatusOK, &out)
	return out.Deployments, err
}
