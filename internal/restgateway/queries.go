package restgateway

import (
	"context"
	"net/http"

	"github.com/shardctl/shardctl/internal/search"
)

// Queries answer the query side of /v2: searches and gets by key, which
// a Zeebe gateway serves from its secondary storage rather than through
// its gRPC API.
type Queries interface {
	// Search answers a parsed search of r.
	Search(ctx context.Context, r *search.Resource, q search.Query) (Answer, error)
	// Get answers GET /v2/<r>/{key}: the item, or a NotFound status.
	Get(ctx context.Context, r *search.Resource, key int64) (Answer, error)
}

// Answer is a query's JSON body and, when some of the data was missing
// (a federation's shard that did not answer, taken as a partial answer),
// what was.
type Answer struct {
	Body []byte
	// Partial names the parts the answer lacks ("" for a whole one).
	Partial string
}

// PartialHeader marks an answer that lacks some of the data, and names
// what it lacks.
const PartialHeader = "Shardctl-Partial-Result"

func (f *front) routeQueries(route func(string, func(http.ResponseWriter, *http.Request) error) http.HandlerFunc) {
	if f.opts.Queries == nil {
		return
	}
	for _, r := range search.Resources {
		route("POST /v2/"+r.Path+"/search", func(w http.ResponseWriter, req *http.Request) error {
			body, err := f.body(req, true)
			if err != nil {
				return err
			}
			q, err := search.Parse(r, body)
			if err != nil {
				return err
			}
			a, err := f.opts.Queries.Search(req.Context(), r, q)
			if err != nil {
				return err
			}
			writeAnswer(w, a)
			return nil
		})
		if !r.Get {
			continue
		}
		route("GET /v2/"+r.Path+"/{key}", func(w http.ResponseWriter, req *http.Request) error {
			key, err := pathKey(req, "key")
			if err != nil {
				return err
			}
			a, err := f.opts.Queries.Get(req.Context(), r, key)
			if err != nil {
				return err
			}
			writeAnswer(w, a)
			return nil
		})
	}
}

func writeAnswer(w http.ResponseWriter, a Answer) {
	if a.Partial != "" {
		w.Header().Set(PartialHeader, a.Partial)
	}
	writeBody(w, a.Body)
}

// NotFound is the error of a get by a key nothing holds, worded as
// Camunda's gateway words it.
func NotFound(r *search.Resource, key int64) error {
	return &httpError{Status: http.StatusNotFound, Title: "NOT_FOUND", Detail: r.Entity + " with key '" + itoa(key) + "' not found"}
}
