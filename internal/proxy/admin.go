package proxy

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

func (p *Proxy) adminHandler() http.Handler {
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
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	}
	mux.HandleFunc("GET /shards", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		doc := map[string]any{"shards": p.Shards()}
		if weights := p.Weights(); weights != nil {
			doc["weights"] = weights
		}
		_ = json.NewEncoder(w).Encode(doc)
	})
	return mux
}
