package proxy

import (
	"context"
	"net"
	"os/exec"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/proctest"
	"github.com/shardctl/shardctl/internal/proxy/route"
	"github.com/shardctl/shardctl/internal/sim"
	"github.com/shardctl/shardctl/internal/sim/simtest"
)

// The frame front is an HTTP/2 server of its own: h2spec's whole suite
// (RFC 7540/9113 and HPACK) passes against it, with no failure.
func TestH2Spec(t *testing.T) {
	h2spec := proctest.Tool(t, "h2spec", "H2SPEC")
	shards := simtest.StartN(t, 1, sim.Config{Partitions: 1})
	p := startProxy(t, Config{Shards: simtest.ShardConfigs(shards), Front: route.FrontFrames})
	host, port, _ := net.SplitHostPort(p.Addr().String())
	ctx, cancel := context.WithTimeout(context.Background(), budget.Of(2*time.Minute))
	defer cancel()
	out, err := exec.CommandContext(ctx, h2spec, "-h", host, "-p", port, "-o", "5").CombinedOutput()
	m := regexp.MustCompile(`(\d+) tests, (\d+) passed, (\d+) skipped, (\d+) failed`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("h2spec: %v\n%s", err, out)
	}
	total, _ := strconv.Atoi(string(m[1]))
	failed, _ := strconv.Atoi(string(m[4]))
	t.Logf("h2spec: %s", m[0])
	if failed > 0 || total < 100 {
		t.Errorf("h2spec against the frame front: %s\n%s", m[0], out)
	}
}
