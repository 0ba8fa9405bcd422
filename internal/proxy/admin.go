package proxy

import (
	"encoding/json"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/shardctl/shardctl/internal/proxy/proxyapi"
)

// Shards reports every shard's state.
func (p *Proxy) Shards() []proxyapi.ShardStatus {
	now := time.Now()
	out := []proxyapi.ShardStatus{}
	for _, s := range p.snapshot() {
		st := proxyapi.ShardStatus{ID: s.ID, Slot: s.Slot, Address: s.Addr, State: s.routingState(), AssignedState: s.State(), Health: s.healthStatus(now),
			Pool: s.Pool(), Partitions: s.partitions, InFlight: s.inflight.Load(), Connections: s.conn.Connections(), MaxStreams: s.conn.Advertised, CoolingOff: s.cooling(now),
			Overloaded: s.overloaded.Load(), Backlog: s.backlogStatus()}
		s.mu.Lock()
		if s.lastErr != "" {
			at := s.lastAt.UTC()
			st.LastError, st.LastErrorAt = s.lastErr, &at
		}
		s.mu.Unlock()
		out = append(out, st)
	}
	return out
}

func (p *Proxy) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(p.metrics.registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !p.ready.Load() {
			http.Error(w, "not ready: starting or stopping", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	if p.cfg.Profiling {
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
