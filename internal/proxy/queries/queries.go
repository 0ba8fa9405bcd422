// Package queries federates the query side of Camunda's REST API (/v2):
// a search goes to every shard that may hold matches, over the shard's
// own REST API, and the answers are merged by the requested order into
// one page, as one cluster holding every shard's data would cut it; a
// get by key goes to the key's shard. Keys in the answers are the
// federation's (the shard's slot in bits 58-62), so they work in every
// other call through the proxy; keys in filters and cursors are turned
// back into each shard's.
//
// A cursor is a position in the order, not an offset (internal/search),
// so the proxy keeps no state between pages: the next page asks every
// shard for the items after the same position. A shard that joins
// between pages contributes its items after that position, one that
// left contributes nothing, a drained one is searched as before.
package queries

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"google.golang.org/grpc/status"

	"github.com/shardctl/shardctl/internal/certs"
	"github.com/shardctl/shardctl/internal/keyslot"
	"github.com/shardctl/shardctl/internal/physicaltenant"
	"github.com/shardctl/shardctl/internal/proxy/proxyapi"
	"github.com/shardctl/shardctl/internal/proxy/route"
	"github.com/shardctl/shardctl/internal/restgateway"
	"github.com/shardctl/shardctl/internal/search"
	"github.com/shardctl/shardctl/internal/shardconn"
)

// DefaultTimeout bounds a search across the shards.
const DefaultTimeout = 10 * time.Second

// Options of a Federation.
type Options struct {
	// Timeout bounds a search or get across the shards (default
	// DefaultTimeout).
	Timeout time.Duration
	// Partial answers a search from the shards that answered when some
	// did not, marked with restgateway.PartialHeader; without it such a
	// search fails with 503 naming the shards.
	Partial bool
	Logger  *slog.Logger
}

// Federation answers searches and gets by key for the whole federation.
type Federation struct {
	core    *route.Core
	opts    Options
	clients map[string]*http.Client // by TLS mode
	metrics metrics
}

type metrics struct {
	searches *prometheus.CounterVec // resource, outcome
	failures *prometheus.CounterVec // shard
	partial  *prometheus.CounterVec // shard
}

var _ restgateway.Queries = (*Federation)(nil)

// New is a Federation over core's shards.
func New(core *route.Core, opts Options) *Federation {
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	f := &Federation{core: core, opts: opts, clients: map[string]*http.Client{}}
	for _, mode := range []string{shardconn.TLSPlain, shardconn.TLSVerified, shardconn.TLSInsecure} {
		// An https:// REST address is checked as the shard's gRPC address
		// is (plain: as verified).
		tc := shardconn.TLSConfig(mode, core.UpstreamRoots())
		if tc == nil {
			tc = shardconn.TLSConfig(shardconn.TLSVerified, core.UpstreamRoots())
		}
		t := certs.Transport(tc)
		t.MaxIdleConnsPerHost = 16
		f.clients[mode] = &http.Client{Transport: t}
	}
	f.metrics = metrics{
		searches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shardctl_proxy_searches_total",
			Help: "Searches of the REST API the proxy federated, by resource and outcome (ok, partial, unavailable, rejected).",
		}, []string{"resource", "outcome"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shardctl_proxy_search_shard_failures_total",
			Help: "Searches and gets a shard did not answer, by shard.",
		}, []string{"shard"}),
		partial: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shardctl_proxy_search_partial_total",
			Help: "Searches answered without a shard's items (--search-partial), by the shard left out.",
		}, []string{"shard"}),
	}
	core.Metrics().Registry().MustRegister(f.metrics.searches, f.metrics.failures, f.metrics.partial)
	return f
}

// Close lets go of idle connections to the shards.
func (f *Federation) Close() {
	for _, c := range f.clients {
		c.CloseIdleConnections()
	}
}

// shardPart is one shard's answer to a search.
type shardPart struct {
	shard *route.Shard
	res   search.Result
	err   error
}

// Search answers q over every shard.
func (f *Federation) Search(ctx context.Context, r *search.Resource, q search.Query) (restgateway.Answer, error) {
	ctx, cancel := context.WithTimeout(ctx, f.opts.Timeout)
	defer cancel()
	o := q.Order(r)
	shards, err := f.core.Serving(physicaltenant.Sent(ctx))
	if err != nil {
		f.metrics.searches.WithLabelValues(r.Path, "rejected").Inc()
		return restgateway.Answer{}, &search.Error{Status: http.StatusNotFound, Title: "NOT_FOUND", Detail: status.Convert(err).Message()}
	}
	var parts []shardPart
	if r == search.ProcessDefinitions {
		parts = f.searchOne(ctx, r, q, shards)
	} else {
		parts = f.searchAll(ctx, r, q, shards)
	}
	var (
		pages   [][]search.Item
		res     search.Result
		missing []string
		reasons []string
	)
	for _, p := range parts {
		if p.err != nil {
			var se *search.Error
			if errors.As(p.err, &se) && se.Status < 500 {
				// The shard refused the query itself: the client's to fix.
				f.metrics.searches.WithLabelValues(r.Path, "rejected").Inc()
				return restgateway.Answer{}, &search.Error{Status: se.Status, Title: se.Title, Detail: "shard " + p.shard.ID + ": " + se.Detail}
			}
			f.metrics.failures.WithLabelValues(p.shard.ID).Inc()
			missing = append(missing, p.shard.ID)
			reasons = append(reasons, "shard "+p.shard.ID+": "+describe(p.err))
			continue
		}
		pages = append(pages, p.res.Items)
		res.Total += p.res.Total
		res.HasMore = res.HasMore || p.res.HasMore
	}
	var a restgateway.Answer
	if len(missing) > 0 {
		if !f.opts.Partial || len(missing) == len(parts) {
			f.metrics.searches.WithLabelValues(r.Path, "unavailable").Inc()
			f.opts.Logger.Warn("search failed: a shard did not answer", "resource", r.Path, "shards", missing, "reasons", reasons)
			return a, &search.Error{Status: http.StatusServiceUnavailable, Title: "UNAVAILABLE",
				Detail: fmt.Sprintf("The search needs every shard and %s did not answer (%s); the proxy answers without them only with --search-partial.",
					plural(missing), strings.Join(reasons, "; "))}
		}
		for _, id := range missing {
			f.metrics.partial.WithLabelValues(id).Inc()
		}
		a.Partial = "missing=" + strings.Join(missing, ",")
		f.metrics.searches.WithLabelValues(r.Path, "partial").Inc()
	} else {
		f.metrics.searches.WithLabelValues(r.Path, "ok").Inc()
	}
	res.Items = search.Merge(pages, o, q.Page)
	a.Body = res.AppendJSON(r, o, nil)
	return a, nil
}

// describe words a shard's failure, with the status it answered.
func describe(err error) string {
	var se *search.Error
	if errors.As(err, &se) {
		return fmt.Sprintf("%d %s: %s", se.Status, se.Title, se.Detail)
	}
	return err.Error()
}

func plural(ids []string) string {
	if len(ids) == 1 {
		return "shard " + ids[0]
	}
	return "shards " + strings.Join(ids, ", ")
}

// searchAll asks every shard (of the request's physical tenant) at once.
func (f *Federation) searchAll(ctx context.Context, r *search.Resource, q search.Query, shards []*route.Shard) []shardPart {
	parts := make([]shardPart, len(shards))
	var wg sync.WaitGroup
	for i, s := range shards {
		parts[i].shard = s
		sq, ok := f.shardQuery(r, q, s)
		if !ok {
			continue // no match can be on this shard
		}
		wg.Go(func() {
			parts[i].res, parts[i].err = f.searchShard(ctx, r, sq, s)
		})
	}
	wg.Wait()
	return parts
}

// searchOne asks one shard: process definitions are deployed to every
// shard (the ledger replays them to late ones), so any one holds them
// all, once, as one cluster would list them. UP shards go first, in slot
// order; the next is asked when one fails.
func (f *Federation) searchOne(ctx context.Context, r *search.Resource, q search.Query, shards []*route.Shard) []shardPart {
	slices.SortStableFunc(shards, func(a, b *route.Shard) int {
		return boolOrder(a.State() != proxyapi.Up) - boolOrder(b.State() != proxyapi.Up)
	})
	var tried []shardPart
	for _, s := range shards {
		p := shardPart{shard: s}
		if sq, ok := f.shardQuery(r, q, s); ok {
			p.res, p.err = f.searchShard(ctx, r, sq, s)
		}
		var se *search.Error
		if p.err == nil || errors.As(p.err, &se) && se.Status < 500 {
			return []shardPart{p}
		}
		tried = append(tried, p)
	}
	return tried
}

func boolOrder(b bool) int {
	if b {
		return 1
	}
	return 0
}

// shardQuery is q as shard s reads it: the filter's keys and the
// cursor's in s's form, an offset as the first from+limit items. ok is
// false when no match can be on s.
func (f *Federation) shardQuery(r *search.Resource, q search.Query, s *route.Shard) (search.Query, bool) {
	legacy := f.core.IsLegacy(s)
	filter, ok := q.Filter.Restrict(r, func(_ int, v search.Value) (search.Value, bool) {
		if keyslot.None(v.N) || v.N < 0 {
			return v, true
		}
		slot, raw := keyslot.Split(v.N)
		return search.KeyValue(raw), slot == s.Slot || slot == 0 && legacy
	})
	if !ok {
		return search.Query{}, false
	}
	sq := search.Query{Filter: filter, Sort: q.Sort, Page: search.Page{Limit: q.Page.Limit}}
	switch {
	case q.Page.After != nil:
		sq.Page.AfterText = search.EncodeCursor(shardPosition(r, q.Sort, q.Page.After, s.Slot))
	case q.Page.Before != nil:
		sq.Page.BeforeText = search.EncodeCursor(shardPosition(r, q.Sort, q.Page.Before, s.Slot))
	default:
		sq.Page.Limit = q.Page.From + q.Page.Limit
	}
	return sq, true
}

// shardPosition is a federation position as shard slot reads it. The
// shard's keys are all in its slot, so against a key of another slot
// they all compare alike: below it when its slot is higher, above it
// when lower. The position then takes the lowest or highest key there
// is, which every key of the shard compares with in the same way.
func shardPosition(r *search.Resource, sort []search.SortField, pos []search.Value, slot int) []search.Value {
	out := slices.Clone(pos)
	for i, v := range out {
		field := r.KeyField()
		if i < len(sort) {
			field = sort[i].Field
		}
		if r.Fields[field].Kind != search.Key || v.Null() || keyslot.None(v.N) || v.N < 0 {
			continue
		}
		vs, raw := keyslot.Split(v.N)
		switch {
		case vs == slot:
			out[i].N = raw
		case vs > slot:
			out[i].N = math.MaxInt64
		default:
			out[i].N = math.MinInt64
		}
	}
	return out
}

// searchShard asks one shard, its answer's keys in the federation's form.
func (f *Federation) searchShard(ctx context.Context, r *search.Resource, q search.Query, s *route.Shard) (search.Result, error) {
	g, err := f.remote(ctx, s)
	if err != nil {
		return search.Result{}, err
	}
	res, err := g.Search(ctx, r, q)
	if err != nil {
		return search.Result{}, f.timedOut(ctx, err)
	}
	for _, it := range res.Items {
		federate(it, s.Slot)
	}
	return res, nil
}

// federate puts a shard's slot in every key of its item.
func federate(it search.Item, slot int) {
	for i, v := range it.Values {
		if v.Kind == search.Key {
			it.Values[i].N = keyslot.With(v.N, slot)
		}
	}
	for name, v := range it.Extra {
		// A key of a newer gateway's field: "...Key": "digits".
		var text string
		if !strings.HasSuffix(name, "Key") || json.Unmarshal(v, &text) != nil {
			continue
		}
		if k, err := strconv.ParseInt(text, 10, 64); err == nil {
			it.Extra[name] = json.RawMessage(`"` + strconv.FormatInt(keyslot.With(k, slot), 10) + `"`)
		}
	}
}

// Get answers GET /v2/<r>/{key} from the key's shard.
func (f *Federation) Get(ctx context.Context, r *search.Resource, key int64) (restgateway.Answer, error) {
	ctx, cancel := context.WithTimeout(ctx, f.opts.Timeout)
	defer cancel()
	s, raw, err := f.core.ShardForKey(key)
	if err != nil {
		return restgateway.Answer{}, restgateway.NotFound(r, key)
	}
	g, err := f.remote(ctx, s)
	var it search.Item
	if err == nil {
		it, err = g.Get(ctx, r, raw)
		err = f.timedOut(ctx, err)
	}
	var se *search.Error
	switch {
	case errors.As(err, &se) && se.Status == http.StatusNotFound:
		return restgateway.Answer{}, restgateway.NotFound(r, key)
	case errors.As(err, &se) && se.Status < 500:
		return restgateway.Answer{}, &search.Error{Status: se.Status, Title: se.Title, Detail: "shard " + s.ID + ": " + se.Detail}
	case err != nil:
		f.metrics.failures.WithLabelValues(s.ID).Inc()
		return restgateway.Answer{}, &search.Error{Status: http.StatusServiceUnavailable, Title: "UNAVAILABLE",
			Detail: fmt.Sprintf("Shard %s holds %s %d and did not answer: %s", s.ID, r.Entity, key, describe(err))}
	}
	federate(it, s.Slot)
	return restgateway.Answer{Body: it.AppendJSON(r, nil)}, nil
}

// remote is shard s's REST API, asked with the client's credentials and
// physical tenant.
func (f *Federation) remote(ctx context.Context, s *route.Shard) (search.Remote, error) {
	if s.REST == "" {
		return search.Remote{}, errors.New("the proxy knows no REST API address for it (rest= in --shard, or the rest metadata of its registration)")
	}
	auth, tenant := restgateway.CallMetadata(ctx)
	mode, _ := shardconn.ParseTLS(s.TLS) // checked when the shard was added
	return search.Remote{Client: f.clients[mode], Base: s.REST, Auth: auth, Tenant: tenant}, nil
}

// timedOut words a shard's failure that the search's deadline caused.
func (f *Federation) timedOut(ctx context.Context, err error) error {
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("no answer within %v", f.opts.Timeout)
	}
	return err
}
