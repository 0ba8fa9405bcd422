package proxy

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/keyslot"
	"github.com/shardctl/shardctl/internal/restgateway/sdktest"
	"github.com/shardctl/shardctl/internal/sim"
	"github.com/shardctl/shardctl/internal/sim/simtest"
)

// TestC8ctlThroughTheProxy runs Camunda's CLI, c8ctl, through the proxy
// over three simulators as an operator would (sdktest's C8ctl workload).
// Every instance completes on the shard its key names, once; the
// incident is resolved on the shard that raised it; c8ctl's errors are
// the proxy's.
func TestC8ctlThroughTheProxy(t *testing.T) {
	shards := simtest.StartN(t, 3, sim.Config{Partitions: 2})
	p, base := startRESTProxy(t, shards)
	c8 := sdktest.NewC8ctl(t, base)
	const n = 6
	o := c8.Workload(t, n, func(instance, job string) string {
		// The operator reads the incident on the instance's shard; its
		// key through the proxy carries that shard's slot.
		slot := slotOf(t, instance)
		if slotOf(t, job) != slot {
			t.Errorf("failed job %s and its instance %s on different slots", job, instance)
		}
		incidents, err := shards[slot-1].Incidents(budget.Context(t, 10*time.Second))
		if err != nil || len(incidents) != 1 {
			t.Fatalf("shard-%d's incidents: %+v (%v), want one", slot, incidents, err)
		}
		return strconv.FormatInt(keyslot.With(incidents[0].Key, slot), 10)
	})

	want := map[int]float64{} // completed instances, by slot
	for _, k := range append(o.Instances, o.Waiting, o.Failing, o.Awaited) {
		want[slotOf(t, k)]++
	}
	if len(want) < 2 {
		t.Errorf("instances on slots %v: want them spread over the shards", want)
	}
	assertEndedWhereKeysSay(t, shards, want, o.Cancelled)
	if got := proxyMetric(t, p, "shardctl_proxy_requests_total", `rpc="CreateProcessInstance"`, `code="OK"`); got != n+3 {
		t.Errorf("CreateProcessInstance through the proxy: %v, want %d", got, n+3)
	}

	// Errors reach c8ctl as the proxy words them: a key of a slot no
	// shard has, and a job completed already.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"complete", "job", strconv.FormatInt(keyslot.With(2251799813685249, 9), 10)}, "no shard has slot 9"},
		{[]string{"complete", "job", o.FailedJob}, "NOT_FOUND"},
	} {
		_, status, ok := c8.Run(t, tc.args...)
		if ok || !slices.ContainsFunc(status, func(s sdktest.Status) bool { return strings.Contains(s.Error, tc.want) }) {
			t.Errorf("c8ctl %v: ok=%v, status %+v: want a failure saying %q", tc.args, ok, status, tc.want)
		}
	}
}
