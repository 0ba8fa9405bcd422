// Package shardconn is how anything in shardctl reaches a shard's
// gateway: its TLS mode against which roots, and the credential its own
// calls carry. The proxy's connections (internal/proxy/upstream) and the
// tools' (probes, the cutover's preflight) are built from the same
// Target, so a probe sees a shard exactly as the proxy does.
// It imports nothing of this module but internal/credential and
// internal/certs.
package shardconn

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/shardctl/shardctl/internal/certs"
	"github.com/shardctl/shardctl/internal/credential"
)

// The TLS modes of a shard: "" or "false" in plain text, "true" over TLS
// checked against the upstream CA, "insecure" over TLS without checking
// the shard's certificate (tests, self-signed labs).
const (
	TLSPlain    = "false"
	TLSVerified = "true"
	TLSInsecure = "insecure"
)

// ParseTLS reads a shard's TLS mode.
func ParseTLS(v string) (string, error) {
	switch v {
	case "", TLSPlain:
		return TLSPlain, nil
	case TLSVerified, TLSInsecure:
		return v, nil
	}
	return "", fmt.Errorf("tls %q: want true, insecure or false", v)
}

// TLSConfig is the TLS configuration of a mode (nil: plain text); roots
// nil checks against the system's.
func TLSConfig(mode string, roots *x509.CertPool) *tls.Config {
	switch mode {
	case TLSVerified:
		return &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: roots}
	case TLSInsecure:
		return &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: true}
	}
	return nil
}

// AuthorizationMD is the metadata key of a gRPC call's credential.
const AuthorizationMD = "authorization"

// Target is one shard's gateway as a caller reaches it.
type Target struct {
	Addr string
	// TLS is the shard's mode (ParseTLS); Roots the CAs a "true" shard's
	// certificate is checked against (nil: the system's).
	TLS   string
	Roots *x509.CertPool
	// Credential is what the caller's own calls carry (nil: nothing).
	Credential *credential.Source
}

// TLSConfig is t's TLS configuration (nil: plain text).
func (t Target) TLSConfig() (*tls.Config, error) {
	mode, err := ParseTLS(t.TLS)
	if err != nil {
		return nil, err
	}
	return TLSConfig(mode, t.Roots), nil
}

// Authorization is the header t's credential gives now, for a call to
// the shard's REST API ("" without a credential).
func (t Target) Authorization(ctx context.Context) (string, error) {
	if t.Credential == nil {
		return "", nil
	}
	return t.Credential.Header(ctx)
}

// RESTClient is an HTTP client for shards' REST APIs: an https one's
// certificate checked against the roots.
func (a *Access) RESTClient() *http.Client {
	return &http.Client{Transport: certs.Transport(TLSConfig(TLSVerified, a.Roots()))}
}

// Transport is how grpc-go dials with a TLS configuration (nil: plain
// text).
func Transport(tc *tls.Config) credentials.TransportCredentials {
	if tc != nil {
		return credentials.NewTLS(tc)
	}
	return insecure.NewCredentials()
}

// Dial is a grpc-go connection to t whose every call carries t's
// credential: for a caller that makes only calls of its own (a probe, a
// preflight). opts are added after t's.
func (t Target) Dial(opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	tc, err := t.TLSConfig()
	if err != nil {
		return nil, fmt.Errorf("gateway %s: %w", t.Addr, err)
	}
	all := []grpc.DialOption{grpc.WithTransportCredentials(Transport(tc))}
	if t.Credential != nil {
		all = append(all, grpc.WithPerRPCCredentials(perRPC{t.Credential}))
	}
	return grpc.NewClient(t.Addr, append(all, opts...)...)
}

// perRPC is a credential as grpc-go attaches it to every call.
type perRPC struct{ src *credential.Source }

func (p perRPC) GetRequestMetadata(ctx context.Context, _ ...string) (map[string]string, error) {
	h, err := p.src.Header(ctx)
	if err != nil {
		// UNAUTHENTICATED, not UNAVAILABLE: a login that fails is not a
		// dead shard.
		return nil, status.Error(codes.Unauthenticated, err.Error())
	}
	return map[string]string{AuthorizationMD: h}, nil
}

// RequireTransportSecurity is false: labs and the simulator speak plain
// text, as Zeebe's own clients allow with OAuth.
func (perRPC) RequireTransportSecurity() bool { return false }

// Own is ctx carrying src's credential for one of the caller's own calls
// (src nil: ctx as it is). A credential that cannot be had now is an
// UNAUTHENTICATED error naming why, with ctx as it is: a caller may ask
// without a token all the same (a live gateway still answers, if only to
// refuse).
func Own(ctx context.Context, src *credential.Source) (context.Context, error) {
	if src == nil {
		return ctx, nil
	}
	h, err := src.Header(ctx)
	if err != nil {
		return ctx, status.Error(codes.Unauthenticated, err.Error())
	}
	return metadata.AppendToOutgoingContext(ctx, AuthorizationMD, h), nil
}

// Refused says whether err is a gateway's refusal of a caller's
// credential: UNAUTHENTICATED or PERMISSION_DENIED. The gateway answered,
// so it is alive; what it refused is who asked.
func Refused(err error) bool {
	c := status.Code(err)
	return c == codes.Unauthenticated || c == codes.PermissionDenied
}

// Refusal reads a refusal as Zeebe's clients name it:
// "UNAUTHENTICATED: the gateway's message" (or PERMISSION_DENIED).
func Refusal(err error) string {
	name := "UNAUTHENTICATED"
	if status.Code(err) == codes.PermissionDenied {
		name = "PERMISSION_DENIED"
	}
	return name + ": " + status.Convert(err).Message()
}

// DefaultCredential is the credential of a shard that names none.
const DefaultCredential = "default"

// Access is what a caller needs to reach any shard: the CA that "true"
// shards' certificates are checked against and the credentials, by name,
// that shards name in their configuration or registry metadata. It owns
// the credentials' refresh: Close stops it. A nil Access reaches shards
// with the system's roots and no credential.
type Access struct {
	roots *x509.CertPool // nil: the system's
	creds map[string]*credential.Source
}

// NewAccess reads caFile ("": the system's roots) and readies creds.
// logger hears the credentials' logins that fail and recover.
func NewAccess(caFile string, creds map[string]credential.Config, logger *slog.Logger) (*Access, error) {
	a := &Access{creds: map[string]*credential.Source{}}
	if caFile != "" {
		roots, err := certs.Pool(caFile)
		if err != nil {
			return nil, fmt.Errorf("--upstream-ca: %w", err)
		}
		a.roots = roots
	}
	for _, name := range slices.Sorted(maps.Keys(creds)) {
		src, err := credential.New(name, creds[name], logger)
		if err != nil {
			a.Close()
			return nil, err
		}
		a.creds[name] = src
	}
	return a, nil
}

// Roots are the CAs "true" shards are checked against (nil: the
// system's).
func (a *Access) Roots() *x509.CertPool {
	if a == nil {
		return nil
	}
	return a.roots
}

// Target is how to reach the shard id at addr in a TLS mode, naming a
// credential ("": DefaultCredential, when there is one).
func (a *Access) Target(id, addr, tlsMode, cred string) (Target, error) {
	if a == nil {
		a = &Access{}
	}
	t := Target{Addr: addr, TLS: tlsMode, Roots: a.roots, Credential: a.creds[cmp.Or(cred, DefaultCredential)]}
	if _, err := ParseTLS(tlsMode); err != nil {
		return t, fmt.Errorf("shard %q: %w", id, err)
	}
	if t.Credential == nil && cred != "" {
		return t, fmt.Errorf("shard %q names credential %q, which is not defined here (defined: %s)", id, cred, a.names())
	}
	return t, nil
}

func (a *Access) names() string {
	if len(a.creds) == 0 {
		return "none"
	}
	return strings.Join(slices.Sorted(maps.Keys(a.creds)), ", ")
}

// Close stops every credential's refresh and waits for it; safe twice.
func (a *Access) Close() {
	if a == nil {
		return
	}
	for _, src := range a.creds {
		src.Close()
	}
}
