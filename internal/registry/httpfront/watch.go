package httpfront

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/shardctl/shardctl/internal/registry/registryapi"
)

// Watch: shardctl's push extension. A watcher names an app and the last
// version it saw; it gets every later change of that app, or a reset with
// the whole app when those changes are no longer kept. As server-sent
// events (ids are versions, so EventSource resumes by Last-Event-ID), or
// as one long-poll answer with ?poll=1.

func (a *api) watch(w http.ResponseWriter, req *http.Request) {
	q := req.URL.Query()
	app := a.appParam(req)
	sinceText := q.Get("since")
	if id := req.Header.Get("Last-Event-ID"); id != "" {
		sinceText = id
	}
	var since uint64
	if sinceText != "" {
		n, err := strconv.ParseUint(sinceText, 10, 64)
		if err != nil {
			http.Error(w, "since: expected a version number from an earlier answer", http.StatusBadRequest)
			return
		}
		since = n
	}
	if poll, _ := strconv.ParseBool(q.Get("poll")); poll {
		a.poll(w, req, app, since)
		return
	}
	a.stream(w, req, app, since)
}

func (a *api) poll(w http.ResponseWriter, req *http.Request, app string, since uint64) {
	timeout := a.opts.PollTimeout
	if s := req.URL.Query().Get("timeout"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			http.Error(w, "timeout: expected a duration such as 30s", http.StatusBadRequest)
			return
		}
		timeout = min(d, 5*time.Minute)
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		changed := a.r.Changed()
		events, version := a.r.EventsSince(app, since)
		if len(events) > 0 {
			writeJSON(w, http.StatusOK, registryapi.PollAnswer{Version: version, Events: events})
			return
		}
		// Changes of other apps move the version on without events.
		since = version
		select {
		case <-changed:
		case <-deadline.C:
			writeJSON(w, http.StatusOK, registryapi.PollAnswer{Version: version, Events: []registryapi.WatchEvent{}})
			return
		case <-req.Context().Done():
			return
		case <-a.r.WatchesEnd():
			writeJSON(w, http.StatusOK, registryapi.PollAnswer{Version: version, Events: []registryapi.WatchEvent{}})
			return
		}
	}
}

func (a *api) stream(w http.ResponseWriter, req *http.Request, app string, since uint64) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming is not supported here; use ?poll=1", http.StatusNotImplemented)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	flusher.Flush()
	if a.opts.Metrics != nil {
		a.opts.Metrics.watchers.Inc()
		defer a.opts.Metrics.watchers.Dec()
	}
	beat := time.NewTicker(a.opts.Heartbeat)
	defer beat.Stop()
	for {
		changed := a.r.Changed()
		events, version := a.r.EventsSince(app, since)
		for _, e := range events {
			b, _ := json.Marshal(e)
			kind := strings.ToLower(e.Action)
			if e.Reset {
				kind = "reset"
			}
			if _, err := fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", e.Version, kind, b); err != nil {
				return
			}
		}
		if len(events) > 0 {
			flusher.Flush()
		}
		since = version
		select {
		case <-changed:
		case <-beat.C:
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil {
				return
			}
			flusher.Flush()
		case <-req.Context().Done():
			return
		case <-a.r.WatchesEnd():
			return
		}
	}
}
