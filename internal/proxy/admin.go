package proxy

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/shardctl/shardctl/internal/authn"
)

func (p *Proxy) adminHandler() (http.Handler, error) {
	guard, err := adminGuard(p.Config().AdminTokenFile)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(p.Metrics().Registry(), promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !p.ready.Load() {
			http.Error(w, "not ready: starting or stopping", http.StatusServiceUnavailable)
			return
		}
		// Still ready without the registry: the proxy routes on the
		// shard set it last sent, and says so.
		if since, lost := p.RegistryLost(); lost {
			fmt.Fprintf(w, "ok\nwarning: the registry has been unreachable since %s (%s): routing on the last shard set it sent\n",
				since.UTC().Format(time.RFC3339), time.Since(since).Round(time.Second))
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	if p.Config().Profiling {
		mux.Handle("/debug/pprof/", guard(http.HandlerFunc(pprof.Index)))
		mux.Handle("/debug/pprof/profile", guard(http.HandlerFunc(pprof.Profile)))
		mux.Handle("/debug/pprof/trace", guard(http.HandlerFunc(pprof.Trace)))
		mux.Handle("/debug/pprof/symbol", guard(http.HandlerFunc(pprof.Symbol)))
		mux.Handle("/debug/pprof/cmdline", guard(http.HandlerFunc(pprof.Cmdline)))
	}
	mux.Handle("GET /shards", guard(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		doc := map[string]any{"shards": p.Shards()}
		if weights := p.Weights(); weights != nil {
			doc["weights"] = weights
		}
		_ = json.NewEncoder(w).Encode(doc)
	})))
	return mux, nil
}

// adminGuard wraps what wants the admin token (/shards, pprof): with no
// token file, nothing.
func adminGuard(tokenFile string) (func(http.Handler) http.Handler, error) {
	if tokenFile == "" {
		return func(h http.Handler) http.Handler { return h }, nil
	}
	token, err := authn.TokenFile(tokenFile)
	if err != nil {
		return nil, fmt.Errorf("--admin-token-file: %w", err)
	}
	return func(h http.Handler) http.Handler { return authn.HTTP(token, h) }, nil
}
