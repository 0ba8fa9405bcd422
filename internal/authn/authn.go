// Package authn checks who calls a server from its Authorization header,
// as a secured Zeebe gateway does: a JWT that an OpenID Connect issuer
// signed for the audience (checked against the keys the issuer
// publishes, by go-oidc), or Basic credentials. A refusal is gRPC's
// UNAUTHENTICATED (401 over HTTP) and never quotes what was sent.
// It imports nothing of this module but internal/credential's secret
// files and internal/shardconn's names.
package authn

import (
	"context"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/shardctl/shardctl/internal/certs"
	"github.com/shardctl/shardctl/internal/credential"
	"github.com/shardctl/shardctl/internal/shardconn"
)

// The modes a server can require.
const (
	ModeNone  = "none"
	ModeOIDC  = "oidc"
	ModeBasic = "basic"
)

// Config is what a server requires of its callers.
type Config struct {
	// Mode is ModeNone ("" too), ModeOIDC or ModeBasic.
	Mode string
	// Issuer is the OIDC issuer's URL (its discovery document is at
	// /.well-known/openid-configuration below it); Audience what a token's
	// aud must hold; IssuerCA the CA file the issuer's certificate is
	// checked against ("": the system's roots).
	Issuer, Audience, IssuerCA string
	// Username and PasswordFile are the Basic credentials let in.
	Username, PasswordFile string
}

// Checker lets a caller in (nil) or says why not: an UNAUTHENTICATED
// status error.
type Checker interface {
	Check(ctx context.Context, authorization string) error
}

// New is the Checker of cfg; nil for ModeNone.
func New(cfg Config) (Checker, error) {
	switch cfg.Mode {
	case "", ModeNone:
		return nil, nil
	case ModeOIDC:
		if cfg.Issuer == "" || cfg.Audience == "" {
			return nil, errors.New("--auth oidc needs --issuer and --audience")
		}
		hc := &http.Client{Timeout: 10 * time.Second}
		if cfg.IssuerCA != "" {
			tc, err := certs.ClientConfig(cfg.IssuerCA, "", "")
			if err != nil {
				return nil, err
			}
			hc.Transport = certs.Transport(tc)
		}
		// The provider keeps this context for its key fetches: it must
		// outlive every call, and its client bounds each fetch.
		return &oidcChecker{issuer: cfg.Issuer, audience: cfg.Audience, ctx: oidc.ClientContext(context.Background(), hc)}, nil
	case ModeBasic:
		if cfg.Username == "" || cfg.PasswordFile == "" {
			return nil, errors.New("--auth basic needs a username and a password file")
		}
		pw, err := credential.WatchFile(cfg.PasswordFile)
		if err != nil {
			return nil, err
		}
		return &basicChecker{user: cfg.Username, password: pw}, nil
	}
	return nil, fmt.Errorf("auth mode %q: want %s, %s or %s", cfg.Mode, ModeNone, ModeOIDC, ModeBasic)
}

func refuse(format string, args ...any) error {
	return status.Errorf(codes.Unauthenticated, format, args...)
}

// bearer is the token of a Bearer Authorization header (ok false: none).
func bearer(authorization string) (token string, ok bool) {
	scheme, token, _ := strings.Cut(authorization, " ")
	token = strings.TrimSpace(token)
	return token, strings.EqualFold(scheme, "Bearer") && token != ""
}

// TokenFile is the Checker of one bearer token held in a file, read
// again when it changes (a proxy's admin endpoints).
func TokenFile(path string) (Checker, error) {
	f, err := credential.WatchFile(path)
	if err != nil {
		return nil, err
	}
	return tokenChecker{f}, nil
}

type tokenChecker struct{ token *credential.SecretFile }

func (c tokenChecker) Check(_ context.Context, authorization string) error {
	got, ok := bearer(authorization)
	if !ok {
		return refuse("Expected a bearer token in the Authorization header")
	}
	want, err := c.token.Read()
	if err != nil {
		return status.Error(codes.Internal, "the server cannot read its token file")
	}
	if subtle.ConstantTimeCompare([]byte(got), []byte(want)) != 1 {
		return refuse("Wrong bearer token")
	}
	return nil
}

// HTTP serves next what c lets in; the rest get 401, WWW-Authenticate
// and why.
func HTTP(c Checker, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if err := c.Check(req.Context(), req.Header.Get("Authorization")); err != nil {
			w.Header().Set("WWW-Authenticate", "Bearer")
			http.Error(w, status.Convert(err).Message(), http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, req)
	})
}

// oidcChecker verifies bearer JWTs. The issuer is found lazily and
// again after a failure (at most once a second), so a server may start
// before its issuer does, as a gateway does.
type oidcChecker struct {
	issuer, audience string
	ctx              context.Context // the HTTP client of the issuer's documents and keys

	mu       sync.Mutex
	verifier *oidc.IDTokenVerifier
	tried    time.Time
	lastErr  error
}

func (c *oidcChecker) Check(ctx context.Context, authorization string) error {
	token, ok := bearer(authorization)
	if !ok {
		return refuse("Expected a bearer token in the Authorization header")
	}
	v, err := c.verifierNow()
	if err != nil {
		return refuse("The token cannot be checked: the issuer %s is not reachable: %v", c.issuer, err)
	}
	if _, err := v.Verify(ctx, token); err != nil {
		return refuse("The token is not valid: %s", reason(err))
	}
	return nil
}

// reason reads go-oidc's error without the token it may quote.
func reason(err error) string {
	var expired *oidc.TokenExpiredError
	if errors.As(err, &expired) {
		return "it expired at " + expired.Expiry.UTC().Format(time.RFC3339)
	}
	msg := err.Error()
	if i := strings.Index(msg, ": "); i >= 0 && strings.HasPrefix(msg, "oidc") {
		msg = msg[i+2:]
	}
	return msg
}

func (c *oidcChecker) verifierNow() (*oidc.IDTokenVerifier, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.verifier != nil {
		return c.verifier, nil
	}
	if time.Since(c.tried) < time.Second {
		return nil, c.lastErr
	}
	c.tried = time.Now()
	p, err := oidc.NewProvider(c.ctx, c.issuer)
	if err != nil {
		c.lastErr = err
		return nil, err
	}
	c.verifier = p.Verifier(&oidc.Config{ClientID: c.audience})
	return c.verifier, nil
}

// basicChecker lets in one user.
type basicChecker struct {
	user     string
	password *credential.SecretFile
}

func (c *basicChecker) Check(_ context.Context, authorization string) error {
	scheme, encoded, _ := strings.Cut(authorization, " ")
	if !strings.EqualFold(scheme, "Basic") {
		return refuse("Expected Basic credentials in the Authorization header")
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(encoded))
	if err != nil {
		return refuse("The Basic credentials are not base64")
	}
	user, pw, _ := strings.Cut(string(raw), ":")
	want, err := c.password.Read()
	if err != nil {
		return status.Error(codes.Internal, "the server cannot read its password file")
	}
	okUser := subtle.ConstantTimeCompare([]byte(user), []byte(c.user))
	okPW := subtle.ConstantTimeCompare([]byte(pw), []byte(want))
	if okUser&okPW != 1 {
		return refuse("Wrong user name or password")
	}
	return nil
}

// Authorization is the authorization a gRPC call sent ("" for none).
func Authorization(ctx context.Context) string {
	if v := metadata.ValueFromIncomingContext(ctx, shardconn.AuthorizationMD); len(v) > 0 {
		return v[0]
	}
	return ""
}

// ServerOptions are the interceptors that make a grpc-go server check
// every call with c.
func ServerOptions(c Checker) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
			if err := c.Check(ctx, Authorization(ctx)); err != nil {
				return nil, err
			}
			return next(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, next grpc.StreamHandler) error {
			if err := c.Check(ss.Context(), Authorization(ss.Context())); err != nil {
				return err
			}
			return next(srv, ss)
		}),
	}
}
