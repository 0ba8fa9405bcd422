package oidctest

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
)

// errNotServed answers every flow but client credentials: the provider
// logs in services, not people.
var errNotServed = errors.New("this provider serves the client credentials grant only")

// storage is what op keeps its clients, keys and tokens in: the clients
// a test names, one RSA key, and a count of the tokens issued.
type storage struct {
	key      *rsa.PrivateKey
	keyID    string
	lifetime time.Duration
	onIssue  func(string)

	mu      sync.Mutex
	clients map[string]*client
	issued  map[string]int
}

var (
	_ op.Storage                  = (*storage)(nil)
	_ op.ClientCredentialsStorage = (*storage)(nil)
)

func newStorage(clients []Client, lifetime time.Duration, onIssue func(string)) (*storage, error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	s := &storage{key: key, keyID: rand.Text()[:12], lifetime: lifetime, onIssue: onIssue, clients: map[string]*client{}, issued: map[string]int{}}
	for _, c := range clients {
		s.clients[c.ID] = &client{Client: c}
	}
	return s, nil
}

func (s *storage) client(id string) (*client, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.clients[id]
	if !ok {
		return nil, errors.New("unknown client")
	}
	cp := *c
	return &cp, nil
}

// ClientCredentials lets a client in by its secret.
func (s *storage) ClientCredentials(_ context.Context, id, secret string) (op.Client, error) {
	c, err := s.client(id)
	if err != nil || c.Secret != secret {
		return nil, errors.New("wrong client id or secret")
	}
	return c, nil
}

// ClientCredentialsTokenRequest is the token a client gets: for itself,
// to the audience the test gave it.
func (s *storage) ClientCredentialsTokenRequest(_ context.Context, id string, scopes []string) (op.TokenRequest, error) {
	c, err := s.client(id)
	if err != nil {
		return nil, err
	}
	return &oidc.JWTTokenRequest{Subject: id, Audience: c.Audience, Scopes: scopes}, nil
}

// CreateAccessToken names a token and says when it expires.
func (s *storage) CreateAccessToken(_ context.Context, req op.TokenRequest) (string, time.Time, error) {
	s.mu.Lock()
	s.issued[req.GetSubject()]++
	s.mu.Unlock()
	if s.onIssue != nil {
		s.onIssue(req.GetSubject())
	}
	return rand.Text(), time.Now().Add(s.lifetime), nil
}

func (s *storage) SigningKey(context.Context) (op.SigningKey, error) {
	return signingKey{s.key, s.keyID}, nil
}

func (s *storage) SignatureAlgorithms(context.Context) ([]jose.SignatureAlgorithm, error) {
	return []jose.SignatureAlgorithm{jose.RS256}, nil
}

func (s *storage) KeySet(context.Context) ([]op.Key, error) {
	return []op.Key{publicKey{&s.key.PublicKey, s.keyID}}, nil
}

func (s *storage) GetClientByClientID(_ context.Context, id string) (op.Client, error) {
	return s.client(id)
}

func (s *storage) AuthorizeClientIDSecret(ctx context.Context, id, secret string) error {
	_, err := s.ClientCredentials(ctx, id, secret)
	return err
}

func (s *storage) Health(context.Context) error { return nil }

// The flows it does not serve.

func (s *storage) CreateAuthRequest(context.Context, *oidc.AuthRequest, string) (op.AuthRequest, error) {
	return nil, errNotServed
}
func (s *storage) AuthRequestByID(context.Context, string) (op.AuthRequest, error) {
	return nil, errNotServed
}
func (s *storage) AuthRequestByCode(context.Context, string) (op.AuthRequest, error) {
	return nil, errNotServed
}
func (s *storage) SaveAuthCode(context.Context, string, string) error { return errNotServed }
func (s *storage) DeleteAuthRequest(context.Context, string) error    { return errNotServed }
func (s *storage) CreateAccessAndRefreshTokens(context.Context, op.TokenRequest, string) (string, string, time.Time, error) {
	return "", "", time.Time{}, errNotServed
}
func (s *storage) TokenRequestByRefreshToken(context.Context, string) (op.RefreshTokenRequest, error) {
	return nil, errNotServed
}
func (s *storage) TerminateSession(context.Context, string, string) error { return errNotServed }
func (s *storage) RevokeToken(context.Context, string, string, string) *oidc.Error {
	return oidc.ErrUnsupportedGrantType()
}
func (s *storage) GetRefreshTokenInfo(context.Context, string, string) (string, string, error) {
	return "", "", op.ErrInvalidRefreshToken
}
func (s *storage) SetUserinfoFromScopes(context.Context, *oidc.UserInfo, string, string, []string) error {
	return nil
}
func (s *storage) SetUserinfoFromToken(context.Context, *oidc.UserInfo, string, string, string) error {
	return errNotServed
}
func (s *storage) SetIntrospectionFromToken(context.Context, *oidc.IntrospectionResponse, string, string, string) error {
	return errNotServed
}
func (s *storage) GetPrivateClaimsFromScopes(context.Context, string, string, []string) (map[string]any, error) {
	return nil, nil
}
func (s *storage) GetKeyByIDAndClientID(context.Context, string, string) (*jose.JSONWebKey, error) {
	return nil, errNotServed
}
func (s *storage) ValidateJWTProfileScopes(context.Context, string, []string) ([]string, error) {
	return nil, errNotServed
}

type signingKey struct {
	key *rsa.PrivateKey
	id  string
}

func (k signingKey) SignatureAlgorithm() jose.SignatureAlgorithm { return jose.RS256 }
func (k signingKey) Key() any                                    { return k.key }
func (k signingKey) ID() string                                  { return k.id }

type publicKey struct {
	key *rsa.PublicKey
	id  string
}

func (k publicKey) ID() string                         { return k.id }
func (k publicKey) Algorithm() jose.SignatureAlgorithm { return jose.RS256 }
func (k publicKey) Use() string                        { return "sig" }
func (k publicKey) Key() any                           { return k.key }

// client is a Client as op sees one: a service that logs in with its
// secret and gets JWT access tokens.
type client struct{ Client }

func (c *client) GetID() string                       { return c.ID }
func (c *client) RedirectURIs() []string              { return nil }
func (c *client) PostLogoutRedirectURIs() []string    { return nil }
func (c *client) ApplicationType() op.ApplicationType { return op.ApplicationTypeWeb }
func (c *client) AuthMethod() oidc.AuthMethod         { return oidc.AuthMethodPost }
func (c *client) ResponseTypes() []oidc.ResponseType  { return nil }
func (c *client) GrantTypes() []oidc.GrantType {
	return []oidc.GrantType{oidc.GrantTypeClientCredentials}
}
func (c *client) LoginURL(string) string               { return "" }
func (c *client) AccessTokenType() op.AccessTokenType  { return op.AccessTokenTypeJWT }
func (c *client) IDTokenLifetime() time.Duration       { return time.Hour }
func (c *client) DevMode() bool                        { return false }
func (c *client) IsScopeAllowed(string) bool           { return true }
func (c *client) IDTokenUserinfoClaimsAssertion() bool { return false }
func (c *client) ClockSkew() time.Duration             { return 0 }
func (c *client) RestrictAdditionalIdTokenScopes() func([]string) []string {
	return func(s []string) []string { return s }
}
func (c *client) RestrictAdditionalAccessTokenScopes() func([]string) []string {
	return func(s []string) []string { return s }
}
