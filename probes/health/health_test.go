package health

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	pb "github.com/shardctl/shardctl/internal/gatewaypb"
)

func TestParseTarget(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want Target
		err  string
	}{
		{in: "10.0.0.5:26500", want: Target{Name: "10.0.0.5:26500", Kind: KindZeebe, Address: "10.0.0.5:26500"}},
		{in: "zeebe=gw:26500", want: Target{Name: "gw:26500", Kind: KindZeebe, Address: "gw:26500"}},
		{in: "registry=http://r:8761/eureka", want: Target{Name: KindRegistry, Kind: KindRegistry, Address: "http://r:8761/eureka"}},
		{in: "prometheus=https://prom:9090", want: Target{Name: KindPrometheus, Kind: KindPrometheus, Address: "https://prom:9090"}},
		{in: "gw", err: "a Zeebe gateway is HOST:PORT"},
		{in: "etcd=http://x", err: `unknown kind "etcd"`},
		{in: "proxy=127.0.0.1:9700", err: "want an http(s) URL"},
	} {
		got, err := ParseTarget(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%s: error %v, want %q", tt.in, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("%s: %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
	}
}

func TestTopologyProblem(t *testing.T) {
	for _, tt := range []struct {
		name string
		t    Topology
		want string
	}{
		{"healthy", Topology{Brokers: 3, Partitions: []Partition{{ID: 1, Leader: 0, Health: []string{"HEALTHY", "HEALTHY"}}}}, ""},
		{"no broker", Topology{}, "no broker"},
		{"leaderless", Topology{Brokers: 1, Partitions: []Partition{{ID: 1, Leader: 0, Health: []string{"HEALTHY"}}, {ID: 2, Leader: -1}}}, "partition 2 has no leader"},
		{"sick follower", Topology{Brokers: 2, Partitions: []Partition{{ID: 1, Leader: 1, Health: []string{"HEALTHY", "DEAD"}}}}, "partition 1: a follower is DEAD"},
		{"sick leader", Topology{Brokers: 1, Partitions: []Partition{{ID: 3, Leader: 0, Health: []string{"UNHEALTHY"}}}}, "partition 3: the leader is UNHEALTHY"},
	} {
		err := tt.t.problem()
		if (err == nil) != (tt.want == "") || (err != nil && !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("%s: %v, want %q", tt.name, err, tt.want)
		}
	}
}

// 8.8's states: a DEAD replica is a problem wherever it is; an INACTIVE
// broker (outside the replication group) is neither a replica nor one,
// and a partition only INACTIVE brokers hold has no leader.
func TestTopologyOfCurrentZeebe(t *testing.T) {
	part := func(id int32, role pb.Partition_PartitionBrokerRole, h pb.Partition_PartitionBrokerHealth) *pb.Partition {
		return &pb.Partition{PartitionId: id, Role: role, Health: h}
	}
	for _, tt := range []struct {
		name    string
		brokers [][]*pb.Partition
		want    string
	}{
		{"inactive beside a healthy group", [][]*pb.Partition{
			{part(1, pb.Partition_LEADER, pb.Partition_HEALTHY)},
			{part(1, pb.Partition_INACTIVE, pb.Partition_UNHEALTHY)}}, ""},
		{"dead follower", [][]*pb.Partition{
			{part(1, pb.Partition_LEADER, pb.Partition_HEALTHY)},
			{part(1, pb.Partition_FOLLOWER, pb.Partition_DEAD)}}, "partition 1: a follower is DEAD"},
		{"dead leader", [][]*pb.Partition{{part(1, pb.Partition_LEADER, pb.Partition_DEAD)}}, "partition 1: the leader is DEAD"},
		{"only inactive", [][]*pb.Partition{{part(1, pb.Partition_INACTIVE, pb.Partition_HEALTHY)}}, "partition 1 has no leader"},
	} {
		resp := &pb.TopologyResponse{PartitionsCount: 1}
		for i, ps := range tt.brokers {
			resp.Brokers = append(resp.Brokers, &pb.BrokerInfo{NodeId: int32(i), Host: "b", Partitions: ps})
		}
		topo := summarize(resp)
		err := topo.problem()
		if (err == nil) != (tt.want == "") || (err != nil && !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("%s: %v, want %q (%+v)", tt.name, err, tt.want, topo.Partitions)
		}
	}
}

// HTTP targets: 2xx is ready, with the registry's reason or the first
// line; anything else is not, and a hung target costs its timeout only.
func TestReadiness(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"ready":false,"reason":"cut off from etcd for 4s"}`))
	})
	mux.HandleFunc("/-/ready", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("Prometheus Server is Ready.\n"))
	})
	mux.HandleFunc("/hung/readyz", func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	srv := httptest.NewServer(mux)
	defer srv.Close()
	c := &Checker{Timeout: 300 * time.Millisecond}
	start := time.Now()
	rep := c.Check(context.Background(), []Target{
		{Name: "r", Kind: KindRegistry, Address: srv.URL + "/eureka"},
		{Name: "p", Kind: KindPrometheus, Address: srv.URL},
		{Name: "h", Kind: KindProxy, Address: srv.URL + "/hung"},
	})
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("took %v: the targets were not checked at once", took)
	}
	want := []struct {
		healthy bool
		reason  string
	}{{false, "cut off from etcd for 4s"}, {true, "Prometheus Server is Ready."}, {false, "no answer within 300ms"}}
	for i, w := range want {
		r := rep.Results[i]
		if r.Healthy != w.healthy || !strings.Contains(r.Reason, w.reason) {
			t.Errorf("%s: healthy=%v %q, want %v %q", r.Name, r.Healthy, r.Reason, w.healthy, w.reason)
		}
	}
	if rep.Healthy() || len(rep.Unhealthy()) != 2 {
		t.Errorf("report healthy=%v unhealthy=%v", rep.Healthy(), rep.Unhealthy())
	}
}

// Through the proxy each shard numbers its partitions from 1: a partition
// is a shard's, and the count covers them all.
func TestFederatedTopology(t *testing.T) {
	tp := Topology{Brokers: 2, PartitionsCount: 3, Partitions: []Partition{
		{Cluster: "a", ID: 1, Leader: 1000, Health: []string{"HEALTHY"}},
		{Cluster: "b", ID: 1, Leader: 2000, Health: []string{"HEALTHY"}},
	}, Missing: 1}
	if err := tp.problem(); err == nil || !strings.Contains(err.Error(), "1 partition of 3 reported by no broker") {
		t.Errorf("%v", err)
	}
	tp.Missing, tp.Partitions[1].Leader = 0, -1
	if err := tp.problem(); err == nil || err.Error() != "b partition 1 has no leader" {
		t.Errorf("%v", err)
	}
}
