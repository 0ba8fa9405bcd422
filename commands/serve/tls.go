package serve

import (
	"errors"
	"fmt"
	"io"

	"github.com/spf13/pflag"

	"github.com/shardctl/shardctl/commands/cmdutil"
	"github.com/shardctl/shardctl/internal/certs"
)

// tlsFiles are the --tls-* flags of a server that may serve TLS.
type tlsFiles struct{ cert, key, clientCA string }

func (t *tlsFiles) addFlags(f *pflag.FlagSet, who string) {
	f.StringVar(&t.cert, "tls-cert", "", "PEM certificate to serve "+who+" over TLS with (with --tls-key; read again when the file changes)")
	f.StringVar(&t.key, "tls-key", "", "PEM private key of --tls-cert")
}

func (t *tlsFiles) validate() error {
	if (t.cert == "") != (t.key == "") {
		return cmdutil.UsageError(errors.New("--tls-cert and --tls-key go together"))
	}
	if t.clientCA != "" && t.cert == "" {
		return cmdutil.UsageError(errors.New("--tls-client-ca needs --tls-cert and --tls-key"))
	}
	return nil
}

// server loads the files (nil without --tls-cert); reloads are reported
// on errOut.
func (t *tlsFiles) server(errOut io.Writer) (*certs.Server, error) {
	if t.cert == "" {
		return nil, nil
	}
	s, err := certs.NewServer(t.cert, t.key, t.clientCA)
	if err != nil {
		return nil, err
	}
	s.OnReload = func(err error) {
		if err != nil {
			fmt.Fprintf(errOut, "TLS: the changed files were refused, the previous certificate stays: %v\n", err)
			return
		}
		fmt.Fprintf(errOut, "TLS: certificate files changed, now serving the new ones\n")
	}
	return s, nil
}
