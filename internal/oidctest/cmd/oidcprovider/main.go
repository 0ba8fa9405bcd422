// Command oidcprovider serves internal/oidctest's OpenID Connect provider
// as a process of its own, for end-to-end tests that start every part as
// a user would: discovery, signing keys and the client credentials grant,
// JWT access tokens of --token-lifetime. Each --client is ID:AUDIENCE:FILE,
// the client secret read from FILE. As shardctl's runtimes, it prints
// "listening on ISSUER-URL" on stderr, then "issued a token to CLIENT"
// for each token, and
// serves until SIGTERM or SIGINT.
//
//	oidcprovider -listen 127.0.0.1:0 -client shardctl:zeebe-api:/run/secret -token-lifetime 5s
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/shardctl/shardctl/internal/certs"
	"github.com/shardctl/shardctl/internal/oidctest"
)

type clients []oidctest.Client

func (c *clients) String() string { return fmt.Sprint(len(*c), " clients") }

func (c *clients) Set(v string) error {
	id, rest, ok1 := strings.Cut(v, ":")
	aud, file, ok2 := strings.Cut(rest, ":")
	if !ok1 || !ok2 || id == "" || file == "" {
		return fmt.Errorf("%q: want ID:AUDIENCE:SECRET-FILE", v)
	}
	secret, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	cl := oidctest.Client{ID: id, Secret: strings.TrimSpace(string(secret))}
	if aud != "" {
		cl.Audience = []string{aud}
	}
	*c = append(*c, cl)
	return nil
}

func main() {
	var cs clients
	listen := flag.String("listen", "127.0.0.1:0", "address to serve on")
	life := flag.Duration("token-lifetime", time.Minute, "lifetime of the access tokens")
	cert := flag.String("tls-cert", "", "serve HTTPS with this certificate (with -tls-key)")
	key := flag.String("tls-key", "", "the key of -tls-cert")
	flag.Var(&cs, "client", "a client that may log in, ID:AUDIENCE:SECRET-FILE (repeatable)")
	flag.Parse()
	cfg := oidctest.Config{Listen: *listen, Clients: cs, TokenLifetime: *life,
		OnIssue: func(client string) { fmt.Fprintln(os.Stderr, "issued a token to", client) }}
	if *cert != "" {
		tc, err := certs.NewServer(*cert, *key, "")
		if err != nil {
			fmt.Fprintln(os.Stderr, "oidcprovider:", err)
			os.Exit(2)
		}
		cfg.TLS = tc
	}
	s, err := oidctest.Start(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "oidcprovider:", err)
		os.Exit(1)
	}
	fmt.Fprintln(os.Stderr, "listening on", s.Issuer())
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
	s.Close()
}
