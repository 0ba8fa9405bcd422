package proxy

import (
	"bufio"
	"bytes"
	"context"
	"net"
	"runtime"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/protobuf/proto"

	"github.com/shardctl/shardctl/internal/budget"
	pb "github.com/shardctl/shardctl/internal/gatewaypb"
	"github.com/shardctl/shardctl/internal/load"
	"github.com/shardctl/shardctl/internal/proxy/grpcwire"
	"github.com/shardctl/shardctl/internal/proxy/route"
	"github.com/shardctl/shardctl/internal/sim"
	"github.com/shardctl/shardctl/internal/sim/simtest"
)

// A client that sends calls as fast as it can and never reads the
// answers: the frame front refuses streams past its concurrency limit
// and stops serving once the answers fill its output, so the proxy's
// memory stays bounded whatever the client sends, and other clients are
// served as before.
func TestClientThatStopsReading(t *testing.T) {
	shards := simtest.StartN(t, 1, sim.Config{Partitions: 1})
	p := startProxy(t, Config{Shards: simtest.ShardConfigs(shards), Front: route.FrontFrames})
	c := newClient(t, p.Addr().String())
	ctx := budget.Context(t, time.Minute)
	if _, err := c.NewDeployResourceCommand().AddResource(load.Process("p", "none"), "p.bpmn").Send(ctx); err != nil {
		t.Fatal(err)
	}
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()

	nc, err := net.Dial("tcp", p.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	// The client writes through a buffer, so it sends as fast as the
	// proxy reads, and stops when a write makes no progress for a while:
	// the proxy has stopped reading it.
	w := bufio.NewWriterSize(stallWriter{nc, budget.Of(250 * time.Millisecond)}, 64<<10)
	fr := http2.NewFramer(w, nc)
	block, body := rawCall(t, "/gateway_protocol.Gateway/CreateProcessInstance",
		&pb.CreateProcessInstanceRequest{BpmnProcessId: "p", Version: -1, Variables: `{"pad":"` + string(bytes.Repeat([]byte("x"), 512)) + `"}`})
	if _, err := w.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	_ = fr.WriteSettings()
	const attempts = 200000
	until := time.Now().Add(budget.Of(3 * time.Second))
	sent := 0
	for id := uint32(1); sent < attempts && time.Now().Before(until); id += 2 {
		if fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block, EndHeaders: true}) != nil ||
			fr.WriteData(id, true, body) != nil {
			break
		}
		sent++
	}
	_ = w.Flush()
	served := func() float64 {
		return proxyMetric(t, p, "shardctl_proxy_requests_total", `rpc="CreateProcessInstance"`)
	}
	var n float64
	budget.Eventually(t, 10*time.Second, "the proxy to stop taking the silent client's calls", func() bool {
		was := n
		n = served()
		time.Sleep(200 * time.Millisecond)
		return n > 0 && n == was
	})
	grew := int64(heap()) - int64(before)
	t.Logf("the client wrote %d calls (%d MiB) before it blocked or ran out; the proxy answered %.0f and refused the rest; heap grew %d KiB",
		sent, sent*len(body)>>20, n, grew>>10)
	// What the proxy holds for the client is its output limit and the
	// calls in flight, not what the client sent.
	if grew > 64<<20 {
		t.Errorf("heap grew %d MiB for a client that reads nothing", grew>>20)
	}
	// Everyone else is served as before.
	cctx, cancel := context.WithTimeout(ctx, budget.Of(5*time.Second))
	defer cancel()
	if _, err := c.NewCreateInstanceCommand().BPMNProcessId("p").LatestVersion().Send(cctx); err != nil {
		t.Errorf("another client's call while one reads nothing: %v", err)
	}
}

// stallWriter fails a write that makes no progress within stall.
type stallWriter struct {
	nc    net.Conn
	stall time.Duration
}

func (s stallWriter) Write(b []byte) (int, error) {
	_ = s.nc.SetWriteDeadline(time.Now().Add(s.stall))
	return s.nc.Write(b)
}

// rawCall is a gRPC call to path with message m as a client's HTTP/2
// frames carry it: the header block, and the DATA (prefix and message).
func rawCall(t *testing.T, path string, m proto.Message) (block, body []byte) {
	t.Helper()
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range []hpack.HeaderField{{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"},
		{Name: ":path", Value: path}, {Name: ":authority", Value: "proxy"},
		{Name: "content-type", Value: "application/grpc"}, {Name: "te", Value: "trailers"}} {
		_ = enc.WriteField(f)
	}
	body, err := grpcwire.MarshalFramed(m)
	if err != nil {
		t.Fatal(err)
	}
	return hb.Bytes(), body
}
