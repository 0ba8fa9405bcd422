package sim

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	pb "github.com/shardctl/shardctl/internal/gatewaypb"
)

// cluster is the simulated Zeebe cluster: its partitions, the deployed
// processes, and the gateway's registries of waiting workers.
type cluster struct {
	cfg        Config
	id         string // the cluster id Topology reports (8.8+)
	partitions []*partition
	repo       *repository
	metrics    *metrics
	pollers    pollers
	streams    streams
	rr         atomic.Uint32 // round-robin start for creations and polls
	// closing ends long polls and job streams when the simulator stops,
	// so a graceful stop does not wait out their timeouts; aborted ends
	// calls still waiting for their partition once the grace period is
	// over.
	closing, aborted chan struct{}
	// stop ends the partitions: a command still queued then never runs.
	stop chan struct{}
	// detached is what a call leaves running after it returns (the
	// answer a partition owes a poll whose worker went away), so Close
	// waits for it.
	detached sync.WaitGroup
}

func (c *cluster) partitionFor(id int32) *partition {
	if id < 1 || int(id) > len(c.partitions) {
		return nil
	}
	return c.partitions[id-1]
}

// pollers are long-polling ActivateJobs requests waiting for jobs of a type.
type pollers struct {
	n       atomic.Int32
	mu      sync.Mutex
	waiting map[string]map[chan struct{}]struct{}
	gauge   *prometheus.GaugeVec
}

func (ps *pollers) register(typ string) chan struct{} {
	ch := make(chan struct{}, 1)
	ps.mu.Lock()
	if ps.waiting == nil {
		ps.waiting = map[string]map[chan struct{}]struct{}{}
	}
	if ps.waiting[typ] == nil {
		ps.waiting[typ] = map[chan struct{}]struct{}{}
	}
	ps.waiting[typ][ch] = struct{}{}
	ps.gauge.WithLabelValues(typ).Set(float64(len(ps.waiting[typ])))
	ps.mu.Unlock()
	ps.n.Add(1)
	return ch
}

func (ps *pollers) unregister(typ string, ch chan struct{}) {
	ps.mu.Lock()
	delete(ps.waiting[typ], ch)
	ps.gauge.WithLabelValues(typ).Set(float64(len(ps.waiting[typ])))
	if len(ps.waiting[typ]) == 0 {
		delete(ps.waiting, typ)
	}
	ps.mu.Unlock()
	ps.n.Add(-1)
}

// notify wakes the pollers of a type; it reports whether there were any.
func (ps *pollers) notify(typ string) bool {
	if ps.n.Load() == 0 {
		return false
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for ch := range ps.waiting[typ] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	return len(ps.waiting[typ]) > 0
}

// jobStream is one open StreamActivatedJobs call: jobs are pushed to it as
// they become activatable.
type jobStream struct {
	worker  string
	timeout time.Duration
	fetch   []string
	jobs    chan *pb.ActivatedJob
}

type streams struct {
	n      atomic.Int32
	mu     sync.RWMutex
	byType map[string][]*jobStream
	rr     atomic.Uint32
	gauge  *prometheus.GaugeVec
}

func (ss *streams) add(typ string, s *jobStream) {
	ss.mu.Lock()
	if ss.byType == nil {
		ss.byType = map[string][]*jobStream{}
	}
	ss.byType[typ] = append(ss.byType[typ], s)
	ss.gauge.WithLabelValues(typ).Set(float64(len(ss.byType[typ])))
	ss.mu.Unlock()
	ss.n.Add(1)
}

// remove unregisters a stream. Pushes happen under the read lock, so once
// remove returns nothing more arrives on s.jobs and it can be drained.
func (ss *streams) remove(typ string, s *jobStream) {
	ss.mu.Lock()
	list := ss.byType[typ]
	for i, x := range list {
		if x == s {
			ss.byType[typ] = append(list[:i:i], list[i+1:]...)
			break
		}
	}
	ss.gauge.WithLabelValues(typ).Set(float64(len(ss.byType[typ])))
	if len(ss.byType[typ]) == 0 {
		delete(ss.byType, typ)
	}
	ss.mu.Unlock()
	ss.n.Add(-1)
}

// push activates j for one of the streams of its type that has room, and
// reports whether one took it.
func (ss *streams) push(p *partition, j *job) bool {
	if ss.n.Load() == 0 {
		return false
	}
	ss.mu.RLock()
	defer ss.mu.RUnlock()
	list := ss.byType[j.typ]
	if len(list) == 0 {
		return false
	}
	start := int(ss.rr.Add(1))
	for i := range list {
		s := list[(start+i)%len(list)]
		if len(s.jobs) == cap(s.jobs) {
			continue
		}
		deadline := now().Add(s.timeout)
		select {
		case s.jobs <- p.activatedJob(j, s.worker, deadline, s.fetch):
			p.markActivated(j, s.worker, deadline)
			p.m.job(jobPushed, j.typ)
			return true
		default:
		}
	}
	return false
}
