package proxy

// BenchmarkRESTPeers is `make bench-rest`: POST /v2/process-instances at
// 64 in flight against three simulated shards serving the REST API,
// through shardctl's REST front (--rest-listen), nginx and HAProxy (both
// proxying HTTP/1.1 to the simulators' REST API with least connections
// and kept-alive upstream connections), and directly. shardctl reaches
// the shards over gRPC, as its REST front turns each request into the
// gateway call it stands for; the peers pass the HTTP on. The rounds,
// medians and ratios are comparePeers'.

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/load"
	"github.com/shardctl/shardctl/internal/proctest"
)

// restAddr is the address of a serve command's "REST API on
// http://ADDR/v2" line.
func restAddr(t testing.TB, p *proctest.Process) string {
	line := p.Line(t, "REST API on http://")
	return strings.TrimSuffix(strings.TrimPrefix(line, "REST API on http://"), "/v2")
}

var benchCreateJSON = []byte(`{"processDefinitionId":"bench"}`)

// restCreates starts an instance of the bench process at one of bases
// (round robin by load goroutine) per call, over at most
// peerConcurrency kept-alive connections to each: past them a call waits
// for one, as a gRPC call waits for a stream, rather than open more (an
// open loop's burst would otherwise open connections by the thousand).
func restCreates(bases []string) caller {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: peerConcurrency, MaxConnsPerHost: peerConcurrency, MaxIdleConns: 4 * peerConcurrency}}
	urls := make([]string, len(bases))
	for i, b := range bases {
		urls[i] = "http://" + b + "/v2/process-instances"
	}
	return func(g int) error { return postJSON(client, urls[g%len(urls)], benchCreateJSON) }
}

// postJSON posts body and reads the whole answer, which must be a 200.
func postJSON(client *http.Client, url string, body []byte) error {
	resp, err := client.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("status %s", resp.Status)
	}
	return err
}

func BenchmarkRESTPeers(b *testing.B) {
	nginx, haproxy := findTool(b, "nginx"), findTool(b, "haproxy")
	dir := b.TempDir()
	bin := proctest.Build(b)
	gomaxprocs := []string{"GOMAXPROCS=2"}
	process := load.Process("bench") // ends as it starts: see BenchmarkPeers

	var grpcAddrs, restAddrs []string
	for range benchShards {
		p := proctest.Start(b, bin, gomaxprocs, "sim", "serve", "--listen", "127.0.0.1:0", "--rest-listen", "127.0.0.1:0",
			"--metrics", "127.0.0.1:0", "--partitions", "3", "--backlog-limit", "-1")
		deployBench(b, p.Addr, process)
		grpcAddrs, restAddrs = append(grpcAddrs, p.Addr), append(restAddrs, restAddr(b, p))
	}
	adminPort := proctest.FreePort(b)
	px := proctest.Start(b, bin, gomaxprocs, benchProxyArgs(adminPort, grpcAddrs,
		"--profiling", "--max-inflight-per-shard", "0", "--rest-listen", "127.0.0.1:0")...)
	deployBench(b, px.Addr, process) // into the proxy's ledger
	proxyREST := restAddr(b, px)

	nginxCmd, nginxAddr := startNginx(b, dir, nginx, restAddrs, false)
	haproxyCmd, haproxyAddr := startHAProxy(b, dir, haproxy, restAddrs, "")

	targets := []peerTarget{
		{"direct", restCreates(restAddrs), 0},
		{"shardctl", restCreates([]string{proxyREST}), px.Cmd.Process.Pid},
		{"nginx", restCreates([]string{nginxAddr}), nginxCmd.Process.Pid},
		{"haproxy", restCreates([]string{haproxyAddr}), haproxyCmd.Process.Pid},
	}
	if old := os.Getenv(envBaseline); old != "" {
		base := proctest.Start(b, old, gomaxprocs, benchProxyArgs(proctest.FreePort(b), grpcAddrs,
			"--max-inflight-per-shard", "0", "--rest-listen", "127.0.0.1:0")...)
		deployBench(b, base.Addr, process)
		targets = append(targets, peerTarget{"baseline", restCreates([]string{restAddr(b, base)}), base.Cmd.Process.Pid})
	}
	comparePeers(fmt.Sprintf("POST /v2/process-instances, %d in flight over HTTP/1.1, %d simulated shards (--capacity 0), %v per run (targets: throughput and CPU per call, and the p99 added at half of direct's saturation, at least as good as the better peer's)",
		peerConcurrency, benchShards, peerRunTime), targets)
	printProfile(b, bin, adminPort, "under load", func() { closedLoop(targets[1].call, 5*time.Second) })
}
