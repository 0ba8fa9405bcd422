package registry

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/linktest"
	"github.com/shardctl/shardctl/internal/logs/logstest"
	"github.com/shardctl/shardctl/internal/registry/replica"
	"github.com/shardctl/shardctl/internal/registry/store"
)

// leaderChanges stands for an etcd member's leader notifications
// (store.EmbeddedMember.LeaderChanged): next closes the channel given
// out, as a member that sees a new leader does.
type leaderChanges struct {
	mu sync.Mutex
	ch chan struct{}
}

func (l *leaderChanges) changed() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ch == nil {
		l.ch = make(chan struct{})
	}
	return l.ch
}

func (l *leaderChanges) next() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ch != nil {
		close(l.ch)
	}
	l.ch = make(chan struct{})
}

// TestWriteLostWithTheLeaderIsAnswered: a write etcd never answers (a
// proposal its member forwarded to a leader that died) is answered 503
// as soon as the member sees the next leader, not at EtcdTimeout; one
// sent after that change waits on in its own leader's term.
func TestWriteLostWithTheLeaderIsAnswered(t *testing.T) {
	if testing.Short() {
		t.Skip("runs an etcd member")
	}
	t.Parallel()
	m := startMember(t)
	link := linktest.Start(t, strings.TrimPrefix(m.ClientURL, "http://"))
	leader := &leaderChanges{}
	log, lines := logstest.New()
	_, base := startServer(t, Config{Store: "etcd:http://" + link.Addr(), Logger: log, Options: Options{
		Replica: replica.Options{ID: "a", LeaderChanged: leader.changed, Cutoff: 2 * store.EtcdTimeout},
	}})
	waitReplicasReady(t, map[string]string{"a": base})
	if code, body := registerLease(t, base, "LOST", "before", 60, ""); code != http.StatusNoContent {
		t.Fatalf("register before: %d %s", code, body)
	}

	link.Silence()
	type answer struct {
		code int
		body string
		at   time.Time
	}
	// register sends a registration from a goroutine of its own, which
	// must not fail the test: the last one is answered only as the
	// server closes, after the test.
	register := func(id string) <-chan answer {
		out := make(chan answer, 1)
		go func() {
			code, body, err := send(testClient, "POST", base+"/eureka/apps/LOST", jsonHeader, fmt.Sprintf(leaseJSON, id, "LOST", 60, ""))
			if err != nil {
				body = err.Error()
			}
			out <- answer{code, body, time.Now()}
		}()
		return out
	}
	lost := register("lost")
	select {
	case a := <-lost:
		t.Fatalf("answered %d %q through a silent etcd", a.code, a.body)
	case <-time.After(500 * time.Millisecond):
	}
	leader.next()
	changedAt := time.Now()
	later := register("later")
	select {
	case a := <-lost:
		took := a.at.Sub(changedAt)
		t.Logf("the write in flight answered %v after the leader changed: %d %s", took.Round(time.Millisecond), a.code, a.body)
		if a.code != http.StatusServiceUnavailable || !strings.Contains(a.body, "leader changed") {
			t.Fatalf("the write in flight: %d %q; want 503 saying etcd's leader changed", a.code, a.body)
		}
	case <-time.After(budget.Of(2 * time.Second)):
		t.Fatalf("the write in flight not answered %v after the leader changed (EtcdTimeout is %v)", budget.Of(2*time.Second), store.EtcdTimeout)
	}
	lines.Wait(t, time.Second, "etcd leader changed", "replica", "a", "commitsInFlight", 1)
	select {
	case a := <-later:
		t.Fatalf("a write sent after the change answered %d %q through a silent etcd", a.code, a.body)
	case <-time.After(time.Second):
	}
}
