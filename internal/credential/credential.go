// Package credential is what shardctl presents to a Zeebe gateway on its
// own behalf (a health check, a ledger replay, a job handed back, a
// probe): a bearer token read from a file, Basic credentials, or a token
// an OAuth 2 authorization server issues for client credentials (as
// Camunda's clients get theirs), refreshed before it expires. Files are
// read again when they change, so a rotated Secret needs no restart.
// A secret never leaves the package: not in an error, a log line or a
// String.
// It imports nothing of this module but its certificate reader.
package credential

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"

	"github.com/shardctl/shardctl/internal/certs"
)

// Config says how to get one credential. Exactly one kind is set: a
// token file, Basic (Username and PasswordFile) or OAuth 2 client
// credentials (TokenURL, ClientID, ClientSecretFile). Secrets are only
// ever named by file, never given inline, so a configuration can be
// shown, logged and stored in the registry's metadata safely.
type Config struct {
	// TokenFile holds a bearer token, read again when it changes.
	TokenFile string `json:"tokenFile,omitempty"`
	// Username and PasswordFile are HTTP Basic credentials.
	Username     string `json:"username,omitempty"`
	PasswordFile string `json:"passwordFile,omitempty"`
	// TokenURL is an OAuth 2 token endpoint (Camunda's
	// ZEEBE_AUTHORIZATION_SERVER_URL); ClientID and the secret in
	// ClientSecretFile log in with the client credentials grant, for
	// Audience (ZEEBE_TOKEN_AUDIENCE) and Scopes when given.
	TokenURL         string   `json:"tokenURL,omitempty"`
	ClientID         string   `json:"clientID,omitempty"`
	ClientSecretFile string   `json:"clientSecretFile,omitempty"`
	Audience         string   `json:"audience,omitempty"`
	Scopes           []string `json:"scopes,omitempty"`
	// TokenCA is the CA file the token endpoint's certificate is checked
	// against ("": the system's roots).
	TokenCA string `json:"tokenCA,omitempty"`
}

// The kinds of credential.
const (
	KindNone   = ""
	KindToken  = "token"
	KindBasic  = "basic"
	KindOAuth2 = "oauth2"
)

// Kind is the kind c configures, or an error naming what is missing or
// mixed.
func (c Config) Kind() (string, error) {
	var kinds []string
	if c.TokenFile != "" {
		kinds = append(kinds, KindToken)
	}
	if c.Username != "" || c.PasswordFile != "" {
		kinds = append(kinds, KindBasic)
	}
	if c.TokenURL != "" || c.ClientID != "" || c.ClientSecretFile != "" || c.Audience != "" || len(c.Scopes) > 0 || c.TokenCA != "" {
		kinds = append(kinds, KindOAuth2)
	}
	switch len(kinds) {
	case 0:
		return KindNone, nil
	case 1:
	default:
		return "", fmt.Errorf("a credential is one of a token file, Basic (username, passwordFile) or OAuth 2 (tokenURL, clientID, clientSecretFile); this one mixes %s", strings.Join(kinds, " and "))
	}
	var missing []string
	switch kinds[0] {
	case KindBasic:
		if c.Username == "" {
			missing = append(missing, "username")
		}
		if c.PasswordFile == "" {
			missing = append(missing, "passwordFile")
		}
	case KindOAuth2:
		if c.TokenURL == "" {
			missing = append(missing, "tokenURL")
		}
		if c.ClientID == "" {
			missing = append(missing, "clientID")
		}
		if c.ClientSecretFile == "" {
			missing = append(missing, "clientSecretFile")
		}
	}
	if len(missing) > 0 {
		return "", fmt.Errorf("a %s credential needs %s", kinds[0], strings.Join(missing, " and "))
	}
	return kinds[0], nil
}

// Source gives the Authorization header of one credential. Safe for
// concurrent use; Close stops its refresh and waits for it.
type Source struct {
	name string
	kind string
	log  *slog.Logger

	// token and basic: the secret's file, read again when it changes.
	file *SecretFile
	user string

	// oauth2
	oauth   clientcredentials.Config
	secret  *SecretFile
	httpc   *http.Client
	refresh *refresher

	mu         sync.Mutex
	usedSecret string // what the last login sent
}

// New readies the credential c, named name in what it says. A token or
// password file must be readable now; an OAuth 2 login starts in the
// background (Header waits for its first token). logger gets a line when
// a refresh fails and when one succeeds again.
func New(name string, c Config, logger *slog.Logger) (*Source, error) {
	kind, err := c.Kind()
	if err != nil {
		return nil, fmt.Errorf("credential %q: %w", name, err)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &Source{name: name, kind: kind, log: logger.With("credential", name)}
	switch kind {
	case KindNone:
		return nil, fmt.Errorf("credential %q: nothing configured (a token file, Basic or OAuth 2 client credentials)", name)
	case KindToken:
		s.file, err = WatchFile(c.TokenFile)
	case KindBasic:
		s.user = c.Username
		s.file, err = WatchFile(c.PasswordFile)
	case KindOAuth2:
		err = s.startOAuth(c)
	}
	if err != nil {
		return nil, fmt.Errorf("credential %q: %w", name, err)
	}
	return s, nil
}

// Name is the credential's name ("" for none).
func (s *Source) Name() string {
	if s == nil {
		return ""
	}
	return s.name
}

// String names the credential without its secret.
func (s *Source) String() string {
	if s.kind == KindOAuth2 {
		return fmt.Sprintf("%s (OAuth 2 client %s at %s)", s.name, s.oauth.ClientID, s.oauth.TokenURL)
	}
	return fmt.Sprintf("%s (%s)", s.name, s.kind)
}

// Header is the value of the Authorization header to send now. An OAuth
// 2 credential waits for its first token, at most until ctx ends; later
// calls get the current token at once, refreshed before it expires.
func (s *Source) Header(ctx context.Context) (string, error) {
	switch s.kind {
	case KindToken:
		tok, err := s.file.Read()
		if err != nil {
			return "", fmt.Errorf("credential %s: %w", s.name, err)
		}
		return "Bearer " + tok, nil
	case KindBasic:
		pw, err := s.file.Read()
		if err != nil {
			return "", fmt.Errorf("credential %s: %w", s.name, err)
		}
		return "Basic " + base64.StdEncoding.EncodeToString([]byte(s.user+":"+pw)), nil
	}
	tok, err := s.refresh.current(ctx)
	if err != nil {
		return "", fmt.Errorf("credential %s: %w", s.name, err)
	}
	return tok.Type() + " " + tok.AccessToken, nil
}

// Refused tells the credential that a gateway refused what it sent
// (UNAUTHENTICATED, 401): an OAuth 2 token is then fetched again before
// its time, in case it was revoked, at most once every 10 s.
func (s *Source) Refused() {
	if s != nil && s.refresh != nil {
		s.refresh.early()
	}
}

// Close stops the background refresh and waits for it; safe twice and
// on nil.
func (s *Source) Close() {
	if s != nil && s.refresh != nil {
		s.refresh.close()
	}
}

func (s *Source) startOAuth(c Config) error {
	secret, err := WatchFile(c.ClientSecretFile)
	if err != nil {
		return err
	}
	s.secret = secret
	s.httpc = &http.Client{Timeout: 10 * time.Second}
	if c.TokenCA != "" {
		tc, err := certs.ClientConfig(c.TokenCA, "", "")
		if err != nil {
			return err
		}
		s.httpc.Transport = certs.Transport(tc)
	}
	s.oauth = clientcredentials.Config{ClientID: c.ClientID, TokenURL: c.TokenURL, Scopes: c.Scopes}
	if c.Audience != "" {
		s.oauth.EndpointParams = map[string][]string{"audience": {c.Audience}}
	}
	s.refresh = newRefresher(s.fetch, s.secretChanged, s.log)
	return nil
}

// fetch logs in once, with the secret as its file holds it now.
func (s *Source) fetch(ctx context.Context) (*oauth2.Token, error) {
	secret, err := s.secret.Read()
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.usedSecret = secret
	s.mu.Unlock()
	cfg := s.oauth
	cfg.ClientSecret = secret
	tok, err := cfg.Token(context.WithValue(ctx, oauth2.HTTPClient, s.httpc))
	if err != nil {
		return nil, scrub(fmt.Errorf("log in at %s as %s: %w", s.oauth.TokenURL, s.oauth.ClientID, err), secret)
	}
	if tok.AccessToken == "" {
		return nil, fmt.Errorf("log in at %s as %s: the answer holds no access token", s.oauth.TokenURL, s.oauth.ClientID)
	}
	return tok, nil
}

// secretChanged says whether the secret's file holds another secret than
// the last login sent.
func (s *Source) secretChanged() bool {
	secret, err := s.secret.Read()
	s.mu.Lock()
	defer s.mu.Unlock()
	return err == nil && secret != s.usedSecret
}

// scrub takes a secret out of an error's text: an authorization server
// may quote what it was sent.
func scrub(err error, secret string) error {
	if secret == "" || !strings.Contains(err.Error(), secret) {
		return err
	}
	return errors.New(strings.ReplaceAll(err.Error(), secret, "[secret]"))
}

// recheck bounds how often a secret's file is looked at.
const recheck = time.Second

// SecretFile is a secret held in a file (a mounted Secret), read again
// when its modification time or size changes: the client's and the
// servers' (internal/authn) side of a rotation.
type SecretFile struct {
	path string

	mu      sync.Mutex
	checked time.Time
	stamp   string
	value   string
	err     error
}

// WatchFile reads the secret at path, which must be there now.
func WatchFile(path string) (*SecretFile, error) {
	f := &SecretFile{path: path}
	if _, err := f.Read(); err != nil {
		return nil, err
	}
	return f, nil
}

// Read is the file's contents, trimmed; a file that cannot be read any
// more, or is empty, keeps its last contents (a Secret's files are
// replaced by a rename, and a moment may have none).
func (f *SecretFile) Read() (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	if !f.checked.IsZero() && now.Sub(f.checked) < recheck {
		return f.value, f.err
	}
	f.checked = now
	stamp, v, err := f.load()
	switch {
	case err == nil:
		f.stamp, f.value, f.err = stamp, v, nil
	case f.value == "":
		f.err = err
	}
	return f.value, f.err
}

// load reads the file unless its stamp is the one read last.
func (f *SecretFile) load() (stamp, value string, err error) {
	fi, err := os.Stat(f.path)
	if err != nil {
		return "", "", fmt.Errorf("read %s: %w", f.path, err)
	}
	stamp = fmt.Sprint(fi.ModTime().UnixNano(), fi.Size())
	if stamp == f.stamp && f.value != "" {
		return stamp, f.value, nil
	}
	b, err := os.ReadFile(f.path)
	if err != nil {
		return "", "", fmt.Errorf("read %s: %w", f.path, err)
	}
	if value = strings.TrimSpace(string(b)); value == "" {
		return "", "", fmt.Errorf("%s is empty", f.path)
	}
	return stamp, value, nil
}
