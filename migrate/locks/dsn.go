package locks

import (
	"cmp"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// ApplicationName is what the preflight's own sessions are called in
// pg_stat_activity, so that a DBA who sees them knows whose they are.
const ApplicationName = "shardctl migrate locks"

// DefaultConnectTimeout bounds a connection attempt when the DSN sets no
// connect_timeout: an unreachable host must fail the preflight, not hang
// the release pipeline.
const DefaultConnectTimeout = 10 * time.Second

// redacted replaces a secret in every message.
const redacted = "xxxxx"

// DSN is a parsed PostgreSQL connection string together with the secrets
// it holds, which no message may repeat.
type DSN struct {
	config  *pgx.ConnConfig
	secrets []string
}

// ParseDSN parses a libpq connection string, URL or key=value; "" reads
// the PG* environment variables as libpq does. Its error never holds the
// password: pgx redacts what it recognises, and the password is scrubbed
// again from every form it could take, for inputs malformed enough to
// defeat pgx's redaction.
func ParseDSN(s string) (*DSN, error) {
	d := &DSN{secrets: dsnSecrets(s)}
	cfg, err := pgx.ParseConfig(s)
	if err != nil {
		return nil, d.Scrub(fmt.Errorf("parse the PostgreSQL DSN: %w", err))
	}
	d.addSecret(cfg.Password)
	cfg.RuntimeParams["application_name"] = ApplicationName
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = DefaultConnectTimeout
	}
	d.config = cfg
	return d, nil
}

// Where names the server, database and user, never the password.
func (d *DSN) Where() string {
	c := d.config
	return fmt.Sprintf("database %s on %s:%d as %s", c.Database, c.Host, c.Port, c.User)
}

// addSecret adds a password and the forms it takes once escaped in a URL
// or quoted in a key=value string.
func (d *DSN) addSecret(pw string) {
	if pw == "" {
		return
	}
	userinfo := strings.TrimPrefix(url.UserPassword("u", pw).String(), "u:")
	quoted := strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(pw)
	for _, s := range []string{pw, url.QueryEscape(pw), url.PathEscape(pw), userinfo, quoted} {
		if !slices.Contains(d.secrets, s) {
			d.secrets = append(d.secrets, s)
		}
	}
	// The longest first: a secret that contains another is replaced whole.
	slices.SortFunc(d.secrets, func(a, b string) int { return cmp.Compare(len(b), len(a)) })
}

// Scrub returns err with every secret of the DSN replaced by xxxxx. The
// result still unwraps to err, for errors.Is and errors.As: callers
// classify by it, and print only Error().
func (d *DSN) Scrub(err error) error {
	if err == nil || d == nil {
		return err
	}
	msg := d.ScrubString(err.Error())
	if msg == err.Error() {
		return err
	}
	return &scrubbedError{msg: msg, err: err}
}

// ScrubString replaces every secret of the DSN in s.
func (d *DSN) ScrubString(s string) string {
	if d == nil {
		return s
	}
	for _, secret := range d.secrets {
		s = strings.ReplaceAll(s, secret, redacted)
	}
	return s
}

type scrubbedError struct {
	msg string
	err error
}

func (e *scrubbedError) Error() string { return e.msg }
func (e *scrubbedError) Unwrap() error { return e.err }

// dsnSecrets finds the passwords in a connection string without trusting
// it to be well formed: the userinfo of a URL (cut at the first and at
// the last @, since a malformed one may hold either), password and
// sslpassword in a URL's query or in key=value pairs.
func dsnSecrets(s string) []string {
	d := &DSN{}
	if rest, ok := cutScheme(s); ok {
		for _, at := range []int{strings.Index(rest, "@"), strings.LastIndex(rest, "@")} {
			if at < 0 {
				continue
			}
			if _, pw, ok := strings.Cut(rest[:at], ":"); ok {
				d.addUnescaped(pw)
			}
		}
		if u, err := url.Parse(s); err == nil {
			if pw, ok := u.User.Password(); ok {
				d.addSecret(pw)
			}
		}
		if _, query, ok := strings.Cut(rest, "?"); ok {
			if q, err := url.ParseQuery(query); err == nil {
				for _, k := range secretKeys {
					for _, v := range q[k] {
						d.addSecret(v)
					}
				}
			}
			for _, m := range queryPassword.FindAllStringSubmatch(query, -1) {
				d.addUnescaped(m[1])
			}
		}
		return d.secrets
	}
	for _, m := range keywordPassword.FindAllStringSubmatch(s, -1) {
		v := m[1]
		if strings.HasPrefix(v, "'") {
			v = unquoteKeyword(v)
		}
		d.addSecret(v)
		d.addSecret(m[1])
	}
	return d.secrets
}

// secretKeys are the connection parameters whose values are secrets.
var secretKeys = []string{"password", "sslpassword"}

var (
	// keywordPassword is a password in a key=value string: bare, or
	// single-quoted with backslash escapes, unterminated quotes included.
	keywordPassword = regexp.MustCompile(`(?:^|\s)(?:password|sslpassword)\s*=\s*('(?:[^'\\]|\\.)*'?|\S+)`)
	queryPassword   = regexp.MustCompile(`(?:^|&)(?:password|sslpassword)=([^&]*)`)
)

func cutScheme(s string) (string, bool) {
	for _, scheme := range []string{"postgres://", "postgresql://"} {
		if len(s) >= len(scheme) && strings.EqualFold(s[:len(scheme)], scheme) {
			return s[len(scheme):], true
		}
	}
	return "", false
}

// addUnescaped adds a secret as written and, when it is valid
// percent-encoding, as decoded.
func (d *DSN) addUnescaped(raw string) {
	d.addSecret(raw)
	if v, err := url.PathUnescape(raw); err == nil {
		d.addSecret(v)
	}
}

func unquoteKeyword(v string) string {
	v = strings.TrimPrefix(v, "'")
	v = strings.TrimSuffix(v, "'")
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		if v[i] == '\\' && i+1 < len(v) {
			i++
		}
		b.WriteByte(v[i])
	}
	return b.String()
}
