package cmdutil

import (
	"fmt"
	"log/slog"

	"github.com/spf13/pflag"

	"github.com/shardctl/shardctl/internal/credential"
	"github.com/shardctl/shardctl/internal/shardconn"
	"github.com/shardctl/shardctl/internal/yamlfile"
)

// CredentialFlags define the "default" credential that calls to shards
// carry when a shard names none: a token file, Basic, or OAuth 2 client
// credentials, every secret named by its file (a mounted Secret), never
// given on the command line.
type CredentialFlags struct{ credential.Config }

// AddFlags adds the --shard-* credential flags.
func (f *CredentialFlags) AddFlags(fs *pflag.FlagSet) {
	c := &f.Config
	fs.StringVar(&c.TokenFile, "shard-token-file", "", "file with the bearer token calls to shards carry (read again when it changes)")
	fs.StringVar(&c.Username, "shard-username", "", "Basic user of calls to shards (with --shard-password-file)")
	fs.StringVar(&c.PasswordFile, "shard-password-file", "", "file with the Basic password of --shard-username")
	fs.StringVar(&c.TokenURL, "shard-token-url", "", "OAuth 2 token endpoint that issues the tokens for shards (client credentials; Camunda's ZEEBE_AUTHORIZATION_SERVER_URL)")
	fs.StringVar(&c.ClientID, "shard-client-id", "", "OAuth 2 client id of --shard-token-url's login")
	fs.StringVar(&c.ClientSecretFile, "shard-client-secret-file", "", "file with the client secret of --shard-client-id (read again at each login)")
	fs.StringVar(&c.Audience, "shard-audience", "", "audience of the OAuth 2 tokens for shards (Camunda's ZEEBE_TOKEN_AUDIENCE, often zeebe-api)")
	fs.StringSliceVar(&c.Scopes, "shard-scope", nil, "scopes of the OAuth 2 tokens for shards (repeatable)")
	fs.StringVar(&c.TokenCA, "shard-token-ca", "", "CA file --shard-token-url's certificate is checked against (default: the system's roots)")
}

// Add puts the flags' credential, if they define one, into creds as
// shardconn.DefaultCredential; it refuses flags that mix kinds, and a
// file that defines a default already.
func (f *CredentialFlags) Add(creds map[string]credential.Config) (map[string]credential.Config, error) {
	kind, err := f.Kind()
	if err != nil {
		return nil, UsageError(fmt.Errorf("--shard-* credential flags: %w", err))
	}
	if kind == credential.KindNone {
		return creds, nil
	}
	if _, dup := creds[shardconn.DefaultCredential]; dup {
		return nil, UsageError(fmt.Errorf("the --shard-* credential flags and the file both define the %q credential: keep one", shardconn.DefaultCredential))
	}
	if creds == nil {
		creds = map[string]credential.Config{}
	}
	creds[shardconn.DefaultCredential] = f.Config
	return creds, nil
}

// ShardAccessFlags are how a tool reaches shards' gateways itself, as
// the proxy does: --upstream-ca, --shard-credentials (the credentials a
// shard's registry metadata names) and the default credential's flags.
type ShardAccessFlags struct {
	UpstreamCA      string
	CredentialsFile string
	Default         CredentialFlags
}

// AddFlags adds --upstream-ca, --shard-credentials and the --shard-*
// credential flags.
func (f *ShardAccessFlags) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&f.UpstreamCA, "upstream-ca", "", "CA file the certificates of shards with tls=true are checked against (default: the system's roots)")
	fs.StringVar(&f.CredentialsFile, "shard-credentials", "", "YAML file of named credentials for shards, as the proxy configuration's credentials: section (a shard's registry metadata names one)")
	f.Default.AddFlags(fs)
}

// Access reads the flags' files and readies their credentials; the
// caller closes it. logger hears logins that fail and recover.
func (f *ShardAccessFlags) Access(logger *slog.Logger) (*shardconn.Access, error) {
	var creds map[string]credential.Config
	if f.CredentialsFile != "" {
		if err := yamlfile.Read(f.CredentialsFile, &creds); err != nil {
			return nil, fmt.Errorf("--shard-credentials: %w", err)
		}
	}
	creds, err := f.Default.Add(creds)
	if err != nil {
		return nil, err
	}
	return shardconn.NewAccess(f.UpstreamCA, creds, logger)
}
