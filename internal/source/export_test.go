package source

import (
	"net/http"
	"time"
)

// ScriptedShard serves the Zeebe metrics of one shard (fakeTarget's) as
// script says they are at each moment since start: instances created and
// completed so far, and records queued. Every record processed is timed
// fast. For the tests of package source_test that drive `shardctl
// signals` through a recovery in seconds, without a simulator.
func ScriptedShard(start time.Time, script func(since time.Duration) (created, completed, queue float64)) http.Handler {
	f := &fakeTarget{}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		created, completed, queue := script(time.Since(start))
		f.mu.Lock()
		// Processed grows with what completes, so the latency counts
		// move; the queue is what is committed past it.
		f.created, f.completed = created, completed
		f.processed = 3 * (created + completed)
		f.committed, f.fast = f.processed+queue, f.processed
		f.mu.Unlock()
		f.ServeHTTP(w, r)
	})
}
