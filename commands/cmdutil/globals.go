package cmdutil

import (
	"fmt"
	"net/http"
	"os"
	"strings"

	"github.com/mattn/go-isatty"
	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/shardctl/shardctl/commands/output"
	"github.com/shardctl/shardctl/completions"
	"github.com/shardctl/shardctl/internal/certs"
	"github.com/shardctl/shardctl/internal/registry/registryapi"
	"github.com/shardctl/shardctl/internal/registry/registryclient"
	"github.com/shardctl/shardctl/plugins"
	"github.com/shardctl/shardctl/probes/proxies"
)

// DefaultRegistry is the registry URL when neither --registry nor
// SHARDCTL_REGISTRY says otherwise.
const DefaultRegistry = "http://127.0.0.1:8761/eureka"

// Globals holds the global flags of docs/cli.md and what every command shares:
// the streams it writes to, the environment it reads, and how the binary
// was invoked. Commands receive it instead of reading os.* themselves, so
// each one runs the same in a test as at a shell.
type Globals struct {
	Streams genericiooptions.IOStreams
	Getenv  func(string) string
	// DisplayName is "shardctl", or "kubectl shard" in kubectl plugin mode.
	DisplayName string
	Plugins     plugins.Finder

	Registry string
	// RegistryCA, RegistryCert and RegistryKey are how an https registry
	// is trusted, and the client certificate shown when it asks for one.
	RegistryCA, RegistryCert, RegistryKey string
	// ProxyCA and ProxyTokenFile are how the proxies' admin endpoints
	// are asked: an https admin's CA, and the token GET /shards wants.
	ProxyCA, ProxyTokenFile string
	Prometheus              string
	Scrape                  []string
	Output                  string
	NoColor                 bool
	// Kube resolves --kubeconfig/--context/-n exactly as kubectl does. It
	// reads nothing until a command asks it for a client or a namespace.
	Kube *genericclioptions.ConfigFlags
}

// AddFlags adds the global flags to the root command.
func (g *Globals) AddFlags(cmd *cobra.Command) {
	f := cmd.PersistentFlags()
	f.StringVar(&g.Registry, "registry", "", "registry base URL (env SHARDCTL_REGISTRY; default "+DefaultRegistry+")")
	f.StringVar(&g.RegistryCA, "registry-ca", "", "CA file an https registry's certificate is checked against (env "+EnvRegistryCA+"; default: the system's roots)")
	f.StringVar(&g.RegistryCert, "registry-cert", "", "client certificate shown to a registry that asks for one, with --registry-key (env "+EnvRegistryCert+")")
	f.StringVar(&g.RegistryKey, "registry-key", "", "private key of --registry-cert (env "+EnvRegistryKey+")")
	f.StringVar(&g.ProxyCA, "proxy-ca", "", "CA file the proxies' https admin certificates are checked against (env "+EnvProxyCA+"; default: the system's roots)")
	f.StringVar(&g.ProxyTokenFile, "proxy-token-file", "", "file with the bearer token the proxies' GET /shards wants (proxy serve --admin-token-file; env "+EnvProxyTokenFile+")")
	f.StringVar(&g.Prometheus, "prometheus", "", "Prometheus server URL for signals (env SHARDCTL_PROMETHEUS)")
	f.StringArrayVar(&g.Scrape, "scrape", nil, "read a /metrics endpoint directly instead of Prometheus, as [NAME=]URL (repeatable)")
	f.StringVarP(&g.Output, "output", "o", "", "output format: table, wide, json or yaml (default table)")
	f.BoolVar(&g.NoColor, "no-color", false, "plain output without colour (env NO_COLOR)")

	// shardctl talks to Kubernetes only for cutover in k8s mode; of
	// kubectl's connection flags it takes the three that select where.
	g.Kube = genericclioptions.NewConfigFlags(true)
	g.Kube.CacheDir, g.Kube.ClusterName, g.Kube.AuthInfoName = nil, nil, nil
	g.Kube.CertFile, g.Kube.KeyFile, g.Kube.CAFile = nil, nil, nil
	g.Kube.BearerToken, g.Kube.Impersonate, g.Kube.ImpersonateUID, g.Kube.ImpersonateGroup = nil, nil, nil, nil
	g.Kube.Username, g.Kube.Password, g.Kube.APIServer, g.Kube.TLSServerName = nil, nil, nil, nil
	g.Kube.Insecure, g.Kube.DisableCompression, g.Kube.Timeout = nil, nil, nil
	g.Kube.ImpersonateUserExtra, g.Kube.ProxyURL = nil, nil
	g.Kube.AddFlags(f)

	_ = cmd.RegisterFlagCompletionFunc("output", completions.Values("table", "wide", "json", "yaml"))
	_ = cmd.RegisterFlagCompletionFunc("context", completions.Contexts(g.contextNames))
}

func (g *Globals) contextNames() ([]string, error) {
	cfg, err := g.Kube.ToRawKubeConfigLoader().RawConfig()
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(cfg.Contexts))
	for n := range cfg.Contexts {
		names = append(names, n)
	}
	return names, nil
}

// RegistryURL is the registry to talk to: --registry, else
// SHARDCTL_REGISTRY, else the default.
func (g *Globals) RegistryURL() string {
	if g.Registry != "" {
		return strings.TrimRight(g.Registry, "/")
	}
	if v := g.Getenv("SHARDCTL_REGISTRY"); v != "" {
		return strings.TrimRight(v, "/")
	}
	return DefaultRegistry
}

// EnvRegistryToken is the bearer token for registry writes when no
// --token-file names one.
const EnvRegistryToken = "SHARDCTL_REGISTRY_TOKEN"

// The environment's names of the registry's TLS files, when the flags
// give none.
const (
	EnvRegistryCA     = "SHARDCTL_REGISTRY_CA"
	EnvRegistryCert   = "SHARDCTL_REGISTRY_CERT"
	EnvRegistryKey    = "SHARDCTL_REGISTRY_KEY"
	EnvProxyCA        = "SHARDCTL_PROXY_CA"
	EnvProxyTokenFile = "SHARDCTL_PROXY_TOKEN_FILE"
)

// ProxyAdmin is how this command asks the proxies' admin endpoints:
// --proxy-ca and --proxy-token-file, or their environment variables.
func (g *Globals) ProxyAdmin() (proxies.Admin, error) {
	var a proxies.Admin
	if ca := g.or(g.ProxyCA, EnvProxyCA); ca != "" {
		tc, err := certs.ClientConfig(ca, "", "")
		if err != nil {
			return a, fmt.Errorf("--proxy-ca: %w", err)
		}
		a.HTTP = &http.Client{Transport: certs.Transport(tc)}
	}
	if file := g.or(g.ProxyTokenFile, EnvProxyTokenFile); file != "" {
		tok, err := registryapi.ReadTokenFile(file)
		if err != nil {
			return a, fmt.Errorf("--proxy-token-file: %w", err)
		}
		a.Token = tok
	}
	return a, nil
}

// RegistryNamed reports whether --registry or SHARDCTL_REGISTRY names a
// registry, for commands that use one only when asked to.
func (g *Globals) RegistryNamed() bool {
	return g.Registry != "" || g.Getenv("SHARDCTL_REGISTRY") != ""
}

// RegistryClient is the one way a command opens the registry: at url
// (RegistryURL when empty), with the token of tokenFile, else of
// SHARDCTL_REGISTRY_TOKEN. A bad URL is a usage error.
func (g *Globals) RegistryClient(url, tokenFile string) (*registryclient.Client, error) {
	if url == "" {
		url = g.RegistryURL()
	}
	token := g.Getenv(EnvRegistryToken)
	if tokenFile != "" {
		t, err := registryapi.ReadTokenFile(tokenFile)
		if err != nil {
			return nil, err
		}
		token = t
	}
	c, err := registryclient.New(url, token)
	if err != nil {
		return nil, UsageError(err)
	}
	ca, cert, key := g.or(g.RegistryCA, EnvRegistryCA), g.or(g.RegistryCert, EnvRegistryCert), g.or(g.RegistryKey, EnvRegistryKey)
	if (cert == "") != (key == "") {
		return nil, UsageError(fmt.Errorf("--registry-cert and --registry-key go together"))
	}
	if ca != "" || cert != "" {
		tc, err := certs.ClientConfig(ca, cert, key)
		if err != nil {
			return nil, fmt.Errorf("registry TLS: %w", err)
		}
		c.UseTLS(tc)
	}
	return c, nil
}

// or is a flag's value, else its environment variable's.
func (g *Globals) or(flag, env string) string {
	if flag != "" {
		return flag
	}
	return g.Getenv(env)
}

// PrometheusURL is --prometheus, else SHARDCTL_PROMETHEUS, else "".
func (g *Globals) PrometheusURL() string {
	if g.Prometheus != "" {
		return g.Prometheus
	}
	return g.Getenv("SHARDCTL_PROMETHEUS")
}

// IsTerminal reports whether a stream is a terminal: a live view on it
// may redraw, a pipe or a log gets plain lines.
func IsTerminal(s any) bool {
	f, ok := s.(*os.File)
	return ok && isatty.IsTerminal(f.Fd())
}

// Printer returns the printer for -o, writing to standard output.
func (g *Globals) Printer() (*output.Printer, error) {
	f, err := output.ParseFormat(g.Output)
	if err != nil {
		return nil, UsageError(fmt.Errorf("-o/--output: %w", err))
	}
	return &output.Printer{Format: f, Out: g.Streams.Out, Colors: g.Colors()}, nil
}

// Colors decides colour for standard output.
func (g *Globals) Colors() output.Colors {
	return output.ColorDecision(g.Streams.Out, g.NoColor, g.Getenv)
}

// Warnf writes a warning line to standard error, as kubectl does.
func (g *Globals) Warnf(format string, a ...any) {
	c := output.ColorDecision(g.Streams.ErrOut, g.NoColor, g.Getenv)
	fmt.Fprintf(g.Streams.ErrOut, "%s %s\n", c.Warn("Warning:"), fmt.Sprintf(format, a...))
}
