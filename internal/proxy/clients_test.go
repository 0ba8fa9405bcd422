package proxy

import (
	"bytes"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/protobuf/proto"

	"github.com/shardctl/shardctl/internal/budget"
	pb "github.com/shardctl/shardctl/internal/gatewaypb"
	"github.com/shardctl/shardctl/internal/load"
	"github.com/shardctl/shardctl/internal/proxy/route"
	"github.com/shardctl/shardctl/internal/sim"
	"github.com/shardctl/shardctl/internal/sim/simtest"
)

// rawClient is an HTTP/2 client connection that has sent its preface
// and SETTINGS and reads what the server sends: its GOAWAY, and the end.
type rawClient struct {
	nc     net.Conn
	goAway chan *http2.GoAwayFrame // the server's GOAWAY, once
	ended  chan struct{}           // the server closed the connection
}

// dialFrom connects to addr from 127.0.0.n.
func dialFrom(addr string, n int) (net.Conn, error) {
	d := net.Dialer{Timeout: budget.Of(time.Second), LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(n))}}
	return d.Dial("tcp", addr)
}

func dialRaw(t *testing.T, addr string) *rawClient { return dialRawFrom(t, addr, 1) }

// dialRawFrom is dialRaw from 127.0.0.n.
func dialRawFrom(t *testing.T, addr string, n int) *rawClient {
	t.Helper()
	nc, err := dialFrom(addr, n)
	if err != nil {
		t.Fatal(err)
	}
	var hello bytes.Buffer
	hello.WriteString(http2.ClientPreface)
	_ = http2.NewFramer(&hello, nil).WriteSettings()
	if _, err := nc.Write(hello.Bytes()); err != nil {
		t.Fatal(err)
	}
	c := &rawClient{nc: nc, goAway: make(chan *http2.GoAwayFrame, 1), ended: make(chan struct{})}
	go c.read()
	t.Cleanup(func() { nc.Close(); <-c.ended })
	return c
}

func (c *rawClient) read() {
	defer close(c.ended)
	fr := http2.NewFramer(io.Discard, c.nc)
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return
		}
		if ga, ok := f.(*http2.GoAwayFrame); ok {
			select {
			case c.goAway <- ga:
			default:
			}
		}
	}
}

// A proxy serving its cap of client connections sends the next one
// GOAWAY saying so and closes it, counted; once one of them ends, a new
// connection is served again. Those served go on throughout.
func TestClientConnectionCap(t *testing.T) {
	shards := simtest.StartN(t, 1, sim.Config{Partitions: 1})
	p := startProxy(t, Config{Shards: simtest.ShardConfigs(shards), Front: route.FrontFrames, Clients: route.ClientLimits{MaxConns: 2}})
	addr := p.Addr().String()
	first := dialRaw(t, addr)
	gw := pb.NewGatewayClient(dial(t, addr))
	ctx := budget.Context(t, time.Minute)
	if _, err := gw.Topology(ctx, &pb.TopologyRequest{}); err != nil {
		t.Fatal(err)
	}
	over := dialRaw(t, addr)
	select {
	case ga := <-over.goAway:
		if ga.ErrCode != http2.ErrCodeEnhanceYourCalm || !strings.Contains(string(ga.DebugData()), "limit of 2 client connections") {
			t.Errorf("GOAWAY %v %q: want ENHANCE_YOUR_CALM naming the limit", ga.ErrCode, ga.DebugData())
		}
	case <-time.After(budget.Of(5 * time.Second)):
		t.Fatal("the connection past the cap was not sent GOAWAY")
	}
	select {
	case <-over.ended:
	case <-time.After(budget.Of(5 * time.Second)):
		t.Fatal("the connection past the cap was not closed")
	}
	if n := proxyMetric(t, p, "shardctl_proxy_clients_cut_off_total", `reason="connections"`); n != 1 {
		t.Errorf("clients cut off for the cap: %v, want 1", n)
	}
	if _, err := gw.Topology(ctx, &pb.TopologyRequest{}); err != nil {
		t.Errorf("a served client past the cap: %v", err)
	}
	first.nc.Close()
	budget.Eventually(t, 5*time.Second, "the proxy to serve one connection fewer", func() bool {
		v, err := simtest.ReadMetric("http://"+p.AdminAddr().String()+"/metrics", "shardctl_proxy_client_connections")
		return err == nil && v == 1
	})
	again := dialRaw(t, addr)
	select {
	case ga := <-again.goAway:
		t.Fatalf("a connection under the cap again was sent GOAWAY %v %q", ga.ErrCode, ga.DebugData())
	case <-again.ended:
		t.Fatal("a connection under the cap again was closed")
	case <-time.After(200 * time.Millisecond):
	}
}

// Connections that send nothing, half a preface, or a preface and no
// SETTINGS (slowloris) are closed at the handshake deadline, counted;
// new connections from their address are then held a moment and closed
// for the cool-down; a Zeebe client's connection made before is served
// throughout.
func TestClientHandshakeDeadline(t *testing.T) {
	shards := simtest.StartN(t, 1, sim.Config{Partitions: 1})
	// Long enough for the Zeebe client's handshake on a busy machine.
	deadline := budget.Capped(300*time.Millisecond, 3*time.Second)
	p := startProxy(t, Config{Shards: simtest.ShardConfigs(shards), Front: route.FrontFrames,
		Clients: route.ClientLimits{HandshakeTimeout: deadline, Cooldown: time.Minute}})
	addr := p.Addr().String()
	gw := pb.NewGatewayClient(dial(t, addr))
	ctx := budget.Context(t, time.Minute)
	if _, err := gw.Topology(ctx, &pb.TopologyRequest{}); err != nil {
		t.Fatal(err)
	}
	sends := []string{"", http2.ClientPreface[:7], http2.ClientPreface}
	start := time.Now()
	for i, s := range sends {
		// Each from a loopback address of its own: a cut cools its
		// address down.
		nc, err := dialFrom(addr, i+2)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		if _, err := io.WriteString(nc, s); err != nil {
			t.Fatal(err)
		}
		ended := make(chan error, 1)
		go func() { _, err := io.Copy(io.Discard, nc); ended <- err }()
		select {
		case <-ended:
			if took := time.Since(start); took < deadline/2 {
				t.Errorf("sent %q: closed after %v, before the %v deadline", s, took, deadline)
			}
		case <-time.After(budget.Of(5 * time.Second)):
			t.Fatalf("sent %q: not closed at the %v handshake deadline", s, deadline)
		}
	}
	if _, err := gw.Topology(ctx, &pb.TopologyRequest{}); err != nil {
		t.Errorf("a Zeebe client beside them: %v", err)
	}
	if n := proxyMetric(t, p, "shardctl_proxy_clients_cut_off_total", `reason="handshake"`); n != float64(len(sends)) {
		t.Errorf("clients cut off at the handshake: %v, want %d", n, len(sends))
	}
	// An address cut off is cooling down: its next connection is held a
	// moment unread and closed, with no handshake.
	held := time.Now()
	again := dialRawFrom(t, addr, 2)
	select {
	case <-again.ended:
		if took := time.Since(held); took < 500*time.Millisecond {
			t.Errorf("a new connection from an address cut off was closed after %v: want it held a moment, so the client does not dial again at once", took)
		}
	case <-time.After(budget.Of(5 * time.Second)):
		t.Fatal("a new connection from an address cut off was not closed")
	}
	select {
	case ga := <-again.goAway:
		t.Errorf("a connection from an address cut off was served: GOAWAY %v", ga.ErrCode)
	default:
	}
	if n := proxyMetric(t, p, "shardctl_proxy_clients_cut_off_total", `reason="cooldown"`); n != 1 {
		t.Errorf("connections closed for the cool-down: %v, want 1", n)
	}
}

// writeCall writes a whole gRPC call, HEADERS and DATA, on stream id.
func writeCall(t *testing.T, fr *http2.Framer, id uint32, path string, m proto.Message) {
	block, body := rawCall(t, path, m)
	_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block, EndHeaders: true})
	_ = fr.WriteData(id, true, body)
}

const createPath = "/gateway_protocol.Gateway/CreateProcessInstance"

// Calls whose request and reset arrive in one read (the rapid-reset
// attack's pattern) never reach a shard; a whole call after them in the
// same read does, and is answered.
func TestCallsResetInTheirReadNeverStart(t *testing.T) {
	shards := simtest.StartN(t, 1, sim.Config{Partitions: 1})
	p := startProxy(t, Config{Shards: simtest.ShardConfigs(shards), Front: route.FrontFrames})
	nc, err := dialFrom(p.Addr().String(), 1)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	req := &pb.CreateProcessInstanceRequest{BpmnProcessId: "absent", Version: -1}
	var out bytes.Buffer
	out.WriteString(http2.ClientPreface)
	fr := http2.NewFramer(&out, nil)
	_ = fr.WriteSettings()
	const resets = 50
	id := uint32(1)
	for ; id < 2*resets; id += 2 {
		writeCall(t, fr, id, createPath, req)
		_ = fr.WriteRSTStream(id, http2.ErrCodeCancel)
	}
	writeCall(t, fr, id, createPath, req)
	if _, err := nc.Write(out.Bytes()); err != nil {
		t.Fatal(err)
	}
	_ = nc.SetReadDeadline(time.Now().Add(budget.Of(10 * time.Second)))
	in := http2.NewFramer(io.Discard, nc)
	for {
		f, err := in.ReadFrame()
		if err != nil {
			t.Fatalf("no answer to the whole call: %v", err)
		}
		if h, ok := f.(*http2.HeadersFrame); ok && h.StreamID == id && h.StreamEnded() {
			break
		}
	}
	time.Sleep(200 * time.Millisecond) // a reset call that reached the shard is counted once it ends
	// The socket may split the write across two reads: one call at the
	// split may start.
	if n := proxyMetric(t, p, "shardctl_proxy_shard_requests_total", `rpc="CreateProcessInstance"`); n < 1 || n > 2 {
		t.Errorf("%v calls reached the shard: want the whole one, not the %d reset in their read", n, resets)
	}
}

// A client that makes calls and reads nothing (its windows closed) has
// its calls past --client-output-limit of waiting answers refused with
// REFUSED_STREAM, counted; its connection stays, and another client is
// served throughout.
func TestClientThatNeverReadsIsRefused(t *testing.T) {
	shards := simtest.StartN(t, 1, sim.Config{Partitions: 1})
	const limit = 8 << 10 // 400 answers (31 bytes of data each) are over it
	p := startProxy(t, Config{Shards: simtest.ShardConfigs(shards), Front: route.FrontFrames, Clients: route.ClientLimits{OutputLimit: limit}})
	gw := pb.NewGatewayClient(dial(t, p.Addr().String()))
	ctx := budget.Context(t, time.Minute)
	if _, err := gw.DeployResource(ctx, &pb.DeployResourceRequest{Resources: []*pb.Resource{{Name: "c.bpmn", Content: load.Process("c", "none")}}}); err != nil {
		t.Fatal(err)
	}
	nc, err := dialFrom(p.Addr().String(), 1)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var out bytes.Buffer
	out.WriteString(http2.ClientPreface)
	fr := http2.NewFramer(&out, nil)
	_ = fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0}) // no answer's data may come
	// Calls in two rounds: those of the second come once the answers of
	// the first wait for the client.
	const round = 400
	id := uint32(1)
	for r := range 2 {
		for range round {
			writeCall(t, fr, id, createPath, &pb.CreateProcessInstanceRequest{BpmnProcessId: "c", Version: -1})
			id += 2
		}
		if _, err := nc.Write(out.Bytes()); err != nil {
			t.Fatal(err)
		}
		out.Reset()
		if r == 0 {
			budget.Eventually(t, 20*time.Second, "the first round to be answered", func() bool {
				v, err := simtest.ReadMetric("http://"+p.AdminAddr().String()+"/metrics", "shardctl_proxy_requests_total", `rpc="CreateProcessInstance"`)
				return err == nil && v >= round
			})
		}
	}
	budget.Eventually(t, 20*time.Second, "every call of the second round to be refused", func() bool {
		v, err := simtest.ReadMetric("http://"+p.AdminAddr().String()+"/metrics", "shardctl_proxy_clients_cut_off_total", `reason="output"`)
		return err == nil && v == round
	})
	if _, err := gw.Topology(ctx, &pb.TopologyRequest{}); err != nil {
		t.Errorf("a client beside it: %v", err)
	}
	if n := proxyMetric(t, p, "shardctl_proxy_client_connections"); n != 2 {
		t.Errorf("%v client connections: want both, the one that reads nothing refused calls, not cut off", n)
	}
}
