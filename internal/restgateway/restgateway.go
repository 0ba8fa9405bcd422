// Package restgateway serves the command endpoints of Camunda 8.8's
// Orchestration Cluster REST API (/v2) over a Zeebe gateway
// (pb.GatewayServer): each request becomes the gateway call a Zeebe
// gateway makes for it. Under the simulator both protocols so share one
// engine, one key space and one set of metrics; under the proxy they
// share one routing core (placement, the ledger, job activation and its
// hand-backs), so a REST call and a gRPC call for the same work end up in
// the same place. Keys are JSON strings with the gRPC bit layout; errors
// are RFC 9457 problem details with the statuses and titles a real 8.8
// gateway gives (a gRPC status code maps to one HTTP status and its name
// is the title). The Authorization header and 8.10's physical-tenant path
// prefix reach the gateway as the gRPC metadata a gRPC client would send.
// It imports nothing of the simulator or the proxy.
package restgateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "github.com/shardctl/shardctl/internal/gatewaypb"
	"github.com/shardctl/shardctl/internal/physicaltenant"
	"github.com/shardctl/shardctl/internal/search"
	"github.com/shardctl/shardctl/internal/shardconn"
)

// DefaultMaxBody is the largest request body, as Camunda's default
// multipart limit (4 MB).
const DefaultMaxBody = 4 << 20

// Options configure the front.
type Options struct {
	// MaxBody bounds a request body (default DefaultMaxBody).
	MaxBody int64
	// Unary, when set, carries a process instance's creation (most of a
	// workload's calls) as protobuf messages rather than through the
	// gateway's Go API: the proxy forwards it as it forwards a gRPC
	// client's call, without a message in Go and a gRPC client between.
	// rpc is the gateway method's name, msg the request message and the
	// answer the response message; auth and tenant are the request's
	// credentials and physical tenant ("" for none), the metadata a
	// gRPC client would send.
	Unary func(ctx context.Context, rpc string, msg []byte, auth, tenant string) ([]byte, error)
	// Queries, when set, serves the searches and gets by key.
	Queries Queries
	// PhysicalTenant, when set, is asked about the physical tenant a
	// request's path names (/physical-tenants/{id}/v2/…) before it is
	// served; its error is the answer (a gateway that does not serve the
	// tenant). Unset, every tenant is passed on as metadata.
	PhysicalTenant func(tenant string) error
	// Authenticate, when set, is asked about every request's
	// Authorization header ("" for none) before it is served; its error
	// is the answer (UNAUTHENTICATED: 401), as a secured gateway's.
	Authenticate func(ctx context.Context, authorization string) error
	Logger       *slog.Logger
}

type front struct {
	gw   pb.GatewayServer
	opts Options
}

// Handler serves /v2 over gw.
func Handler(gw pb.GatewayServer, opts Options) http.Handler {
	if opts.MaxBody <= 0 {
		opts.MaxBody = DefaultMaxBody
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	f := &front{gw: gw, opts: opts}
	mux := http.NewServeMux()
	route := func(pattern string, h func(w http.ResponseWriter, req *http.Request) error) http.HandlerFunc {
		serve := func(w http.ResponseWriter, req *http.Request) {
			defer func() {
				if v := recover(); v != nil {
					opts.Logger.Error("REST handler panic", "route", pattern, "panic", v)
					writeProblem(w, req, http.StatusInternalServerError, "INTERNAL", "An internal error occurred while processing the request.")
				}
			}()
			if err := h(w, req); err != nil {
				writeError(w, req, err)
			}
		}
		mux.HandleFunc(pattern, serve)
		return serve
	}
	route("GET /v2/topology", f.topology)
	route("GET /v2/status", f.status)
	route("POST /v2/deployments", f.deploy)
	create := route("POST /v2/process-instances", f.createInstance)
	route("POST /v2/process-instances/{processInstanceKey}/cancellation", f.onKey("processInstanceKey", f.cancelInstance))
	route("POST /v2/jobs/activation", f.activateJobs)
	route("POST /v2/jobs/{jobKey}/completion", f.completeJob)
	route("POST /v2/jobs/{jobKey}/failure", f.failJob)
	route("POST /v2/jobs/{jobKey}/error", f.throwError)
	route("PATCH /v2/jobs/{jobKey}", f.updateJob)
	route("POST /v2/messages/publication", f.publishMessage)
	route("POST /v2/signals/broadcast", f.broadcastSignal)
	route("POST /v2/incidents/{incidentKey}/resolution", f.onKey("incidentKey", f.resolveIncident))
	route("PUT /v2/element-instances/{elementInstanceKey}/variables", f.setVariables)
	route("POST /v2/resources/{resourceKey}/deletion", f.onKey("resourceKey", f.deleteResource))
	route("POST /v2/decision-definitions/evaluation", f.evaluateDecision)
	route("POST /v2/conditionals/evaluation", f.evaluateConditionals)
	f.routeQueries(route)
	mux.HandleFunc("/", noEndpoint)
	// Creations, most of a workload's calls, skip the mux's matching.
	return withCallMetadata(opts.PhysicalTenant, opts.Authenticate, http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method == http.MethodPost && req.URL.Path == "/v2/process-instances" {
			create(w, req)
			return
		}
		mux.ServeHTTP(w, req)
	}))
}

// noEndpoint answers a path the API does not have, as a problem detail.
func noEndpoint(w http.ResponseWriter, req *http.Request) {
	writeProblem(w, req, http.StatusNotFound, "Not Found", "No endpoint "+req.Method+" "+req.URL.Path+".")
}

// The gRPC metadata a REST request carries to the gateway, under the
// names a gRPC client sends: its credentials, and the physical tenant
// that 8.10 names in the path (/physical-tenants/{id}/v2/…) and in a
// header over gRPC.
const (
	AuthorizationMD  = shardconn.AuthorizationMD
	PhysicalTenantMD = physicaltenant.Header
)

// withCallMetadata hands the gateway what the request says about its
// caller as incoming gRPC metadata, and serves a physical tenant's
// prefixed paths as the plain ones (once check, if any, passed the
// tenant).
func withCallMetadata(check func(string) error, authenticate func(context.Context, string) error, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if authenticate != nil {
			if err := authenticate(req.Context(), req.Header.Get("Authorization")); err != nil {
				if status.Code(err) == codes.Unauthenticated {
					w.Header().Set("WWW-Authenticate", "Bearer")
				}
				writeError(w, req, err)
				return
			}
		}
		var md metadata.MD
		if rest, ok := strings.CutPrefix(req.URL.Path, physicaltenant.PathPrefix); ok {
			tenant, path, _ := strings.Cut(rest, "/")
			if tenant == "" || !strings.HasPrefix(path, "v2/") {
				noEndpoint(w, req)
				return
			}
			if check != nil {
				if err := check(tenant); err != nil {
					writeError(w, req, err)
					return
				}
			}
			md = metadata.Pairs(PhysicalTenantMD, tenant)
			u := *req.URL
			u.Path, u.RawPath = "/"+path, ""
			req = req.WithContext(req.Context())
			req.URL = &u
		}
		if auth := req.Header.Get("Authorization"); auth != "" {
			if md == nil {
				md = metadata.MD{}
			}
			md.Set(AuthorizationMD, auth)
		}
		if md != nil {
			req = req.WithContext(metadata.NewIncomingContext(req.Context(), md))
		}
		next.ServeHTTP(w, req)
	})
}

// CallMetadata is the caller's credentials and physical tenant that
// withCallMetadata put in ctx ("" for none).
func CallMetadata(ctx context.Context) (auth, tenant string) {
	// ValueFromIncomingContext reads one key without copying the map.
	if v := metadata.ValueFromIncomingContext(ctx, AuthorizationMD); len(v) > 0 {
		auth = v[0]
	}
	return auth, physicaltenant.Sent(ctx)
}

// problem is an RFC 9457 problem detail.
type problem struct {
	Type     string `json:"type"`
	Title    string `json:"title"`
	Status   int    `json:"status"`
	Detail   string `json:"detail"`
	Instance string `json:"instance"`
}

// httpError is an error the front itself answers, with its status and
// title (the framework's errors: a body that does not parse, a wrong
// content type, a key that is no number), in the shape a search's
// refusals have too.
type httpError = search.Error

func badRequest(format string, a ...any) error {
	return &httpError{Status: http.StatusBadRequest, Title: "Bad Request", Detail: fmt.Sprintf(format, a...)}
}

// invalidArgument is a request the gateway's validation refuses.
func invalidArgument(format string, a ...any) error {
	return status.Errorf(codes.InvalidArgument, format, a...)
}

// statusOf maps a gRPC status to the HTTP status a Camunda 8.8 gateway
// gives for the same service error; the title is Camunda's name of it.
var statusOf = map[codes.Code]struct {
	http  int
	title string
}{
	codes.InvalidArgument:    {http.StatusBadRequest, "INVALID_ARGUMENT"},
	codes.Unauthenticated:    {http.StatusUnauthorized, "UNAUTHORIZED"},
	codes.PermissionDenied:   {http.StatusForbidden, "FORBIDDEN"},
	codes.NotFound:           {http.StatusNotFound, "NOT_FOUND"},
	codes.AlreadyExists:      {http.StatusConflict, "ALREADY_EXISTS"},
	codes.FailedPrecondition: {http.StatusConflict, "INVALID_STATE"},
	codes.Aborted:            {http.StatusBadGateway, "ABORTED"},
	codes.Unavailable:        {http.StatusServiceUnavailable, "UNAVAILABLE"},
	codes.ResourceExhausted:  {http.StatusServiceUnavailable, "RESOURCE_EXHAUSTED"},
	codes.DeadlineExceeded:   {http.StatusGatewayTimeout, "DEADLINE_EXCEEDED"},
	// What this gateway does not do (the simulator's BPMN subset).
	codes.Unimplemented: {http.StatusNotImplemented, "NOT_IMPLEMENTED"},
	codes.Canceled:      {499, "CANCELED"},
}

func writeError(w http.ResponseWriter, req *http.Request, err error) {
	var he *httpError
	if errors.As(err, &he) {
		writeProblem(w, req, he.Status, he.Title, he.Detail)
		return
	}
	st := status.Convert(err)
	m, ok := statusOf[st.Code()]
	if !ok {
		m.http, m.title = http.StatusInternalServerError, "INTERNAL"
	}
	writeProblem(w, req, m.http, m.title, st.Message())
}

func writeProblem(w http.ResponseWriter, req *http.Request, code int, title, detail string) {
	b, _ := json.Marshal(problem{Type: "about:blank", Title: title, Status: code, Detail: detail, Instance: instance(req)})
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(code)
	_, _ = w.Write(b)
}

// instance is the path the client asked for, a physical tenant's prefix
// included.
func instance(req *http.Request) string {
	if p, _, _ := strings.Cut(req.RequestURI, "?"); strings.HasPrefix(p, "/") {
		return p
	}
	return req.URL.Path
}

// writeBody answers with a JSON body already written.
func writeBody(w http.ResponseWriter, b []byte) {
	h := w.Header()
	h["Content-Type"] = jsonType
	h.Set("Content-Length", strconv.Itoa(len(b)))
	_, _ = w.Write(b)
}

// jsonType is the Content-Type of every JSON answer, shared (a
// header's value is never changed in place).
var jsonType = []string{"application/json"}

// writeJSON answers v as JSON, with <, > and & as they are (Camunda's
// gateway does not escape them; encoding/json's Marshal would).
func writeJSON(w http.ResponseWriter, v any) error {
	b, err := marshal(v)
	if err != nil {
		return err
	}
	writeBody(w, b)
	return nil
}

// marshal is json.Marshal with <, > and & as they are.
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// decode reads a JSON body into v as Camunda's gateway does: strictly
// (an unknown property or a value of the wrong type is a 400), bounded,
// and only as application/json. An empty body leaves v as it is when
// optional.
func (f *front) decode(req *http.Request, v any, optional bool) error {
	body, err := f.body(req, optional)
	if err != nil || body == nil {
		return err
	}
	return unmarshal(body, v)
}

// body is a request's JSON body, bounded; nil when it is empty and
// optional.
func (f *front) body(req *http.Request, optional bool) ([]byte, error) {
	body, err := f.readBody(req)
	if err != nil {
		return nil, tooLargeOr(err, f.opts.MaxBody, "Failed to read request body")
	}
	if len(bytes.TrimSpace(body)) == 0 {
		if optional {
			return nil, nil
		}
		return nil, badRequest("Required request body is missing")
	}
	if ct := req.Header.Get("Content-Type"); !isJSON(ct) {
		return nil, unsupported(ct)
	}
	return body, nil
}

// readBody reads a body of at most MaxBody bytes: one of a length known
// and allowed into a buffer of that size, any other as it comes, up to
// the limit (so that the client, still sending, reads the 413).
func (f *front) readBody(req *http.Request) ([]byte, error) {
	if n := req.ContentLength; n >= 0 && n <= f.opts.MaxBody {
		body := make([]byte, n)
		if _, err := io.ReadFull(req.Body, body); err != nil {
			return nil, err
		}
		return body, nil
	}
	return io.ReadAll(http.MaxBytesReader(nil, req.Body, f.opts.MaxBody))
}

// unmarshal reads body into v strictly.
func unmarshal(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return parseError(err)
	}
	if dec.More() {
		return badRequest("Failed to read request: more than one JSON value")
	}
	return nil
}

func unsupported(contentType string) error {
	return &httpError{Status: http.StatusUnsupportedMediaType, Title: "Unsupported Media Type", Detail: fmt.Sprintf("Content-Type '%s' is not supported.", contentType)}
}

// tooLargeOr is a body over the limit (413), else what failed reading it.
func tooLargeOr(err error, limit int64, what string) error {
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return &httpError{Status: http.StatusRequestEntityTooLarge, Title: "Payload Too Large", Detail: fmt.Sprintf("Request body is larger than %d bytes", limit)}
	}
	return badRequest("%s: %v", what, err)
}

func isJSON(ct string) bool {
	if ct == "application/json" {
		return true
	}
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json"))
}

// parseError words a JSON error as Camunda's gateway does: the property
// that could not be read.
func parseError(err error) error {
	var typeErr *json.UnmarshalTypeError
	switch {
	case errors.As(err, &typeErr):
		return badRequest("Request property [%s] cannot be parsed", typeErr.Field)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return badRequest("Request property [%s] cannot be parsed: unknown property", strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`))
	}
	return badRequest("Failed to read request: %v", err)
}

// pathKey reads a key from the path, as the gateway's converter does.
func pathKey(req *http.Request, name string) (int64, error) {
	v := req.PathValue(name)
	k, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, badRequest("Failed to convert '%s' with value: '%s'", name, v)
	}
	return k, nil
}

// Key is a key in JSON: a string of decimal digits (LongKey); a number
// or anything else does not parse.
type Key int64

// UnmarshalJSON reads a LongKey.
func (k *Key) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return &json.UnmarshalTypeError{Value: string(b), Type: nil}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return &json.UnmarshalTypeError{Value: s, Type: nil}
	}
	*k = Key(n)
	return nil
}

// MarshalJSON writes a LongKey.
func (k Key) MarshalJSON() ([]byte, error) {
	return []byte(`"` + strconv.FormatInt(int64(k), 10) + `"`), nil
}

// Object is a JSON object passed on as it came: the variables of a
// request, handed to the gateway as its JSON document, and the gateway's
// documents in an answer. It is never decoded into a map and encoded
// again (on the REST front's hot path that cost more than the call's
// routing). Anything but an object or null does not parse, as in
// Camunda's gateway; an empty Object encodes as {}.
type Object json.RawMessage

// UnmarshalJSON takes an object (encoding/json has checked it is valid
// JSON) or null.
func (o *Object) UnmarshalJSON(b []byte) error {
	switch {
	case string(b) == "null":
		*o = nil
	case len(b) > 0 && b[0] == '{':
		*o = append((*o)[:0], b...)
	default:
		return &json.UnmarshalTypeError{Value: string(b), Type: nil}
	}
	return nil
}

// MarshalJSON writes the object, {} when there is none.
func (o Object) MarshalJSON() ([]byte, error) {
	if len(o) == 0 {
		return []byte("{}"), nil
	}
	return o, nil
}

// document is a request's object as the gRPC gateway's JSON string; none
// is "".
func document(o Object) string { return string(o) }

// blank is a required string the request left out or empty.
func blank(s *string) bool { return s == nil || strings.TrimSpace(*s) == "" }

// object is the gateway's JSON document as an object of an answer: {}
// when it is empty, or not an object (a gateway's fault, which must not
// make the answer invalid JSON).
func object(doc string) Object {
	if doc == "" || doc[0] != '{' || !json.Valid([]byte(doc)) {
		return nil
	}
	return Object(doc)
}

// noContent answers a command with nothing to say.
func noContent(w http.ResponseWriter) error {
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
