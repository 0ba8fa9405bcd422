package sim

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// adminHandler serves metrics, health, readiness and fault injection:
//
//	POST /fault/pause?duration=5s   stall processing (a GC pause)
//	POST /fault/slow?factor=4       every record takes 4x as long
//	POST /fault/refuse              the gateway refuses connections
//	POST /fault/resume              end every fault
//	GET  /fault                     the current faults, as JSON
//	GET  /incidents                 open incidents, as JSON
func (s *Sim) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.cluster.metrics.registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		s.mu.Lock()
		ready := s.ready && !s.refusing
		s.mu.Unlock()
		if !ready {
			http.Error(w, "not ready: the gateway is stopping or refusing connections", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /incidents", func(w http.ResponseWriter, r *http.Request) {
		list, err := s.Incidents(r.Context())
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		if list == nil {
			list = []Incident{}
		}
		writeJSON(w, map[string]any{"incidents": list})
	})
	mux.HandleFunc("GET /fault", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, s.faults()) })
	mux.HandleFunc("POST /fault/pause", func(w http.ResponseWriter, r *http.Request) {
		d, err := time.ParseDuration(r.URL.Query().Get("duration"))
		if err != nil || d <= 0 {
			http.Error(w, "duration must be a positive Go duration, e.g. ?duration=5s", http.StatusBadRequest)
			return
		}
		s.Pause(d)
		writeJSON(w, s.faults())
	})
	mux.HandleFunc("POST /fault/slow", func(w http.ResponseWriter, r *http.Request) {
		f, err := strconv.ParseFloat(r.URL.Query().Get("factor"), 64)
		if err == nil {
			err = s.SlowDown(f)
		}
		if err != nil {
			http.Error(w, "factor must be a number of 1 or more, e.g. ?factor=4", http.StatusBadRequest)
			return
		}
		writeJSON(w, s.faults())
	})
	mux.HandleFunc("POST /fault/refuse", func(w http.ResponseWriter, _ *http.Request) {
		s.Refuse()
		writeJSON(w, s.faults())
	})
	mux.HandleFunc("POST /fault/resume", func(w http.ResponseWriter, _ *http.Request) {
		if err := s.Resume(); err != nil {
			http.Error(w, "resume: "+err.Error(), http.StatusInternalServerError)
			return
		}
		writeJSON(w, s.faults())
	})
	return mux
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
