package proxy

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/camunda/zeebe/clients/go/v8/pkg/zbc"

	"github.com/shardctl/shardctl/internal/sim"
	"github.com/shardctl/shardctl/internal/sim/simtest"
)

// startShards runs n simulated Zeebe clusters on free loopback ports.
func startShards(t testing.TB, n int, cfg sim.Config) []*sim.Sim {
	t.Helper()
	var out []*sim.Sim
	for range n {
		out = append(out, simtest.Start(t, cfg))
	}
	return out
}

func shardConfigs(shards []*sim.Sim) []ShardConfig {
	var out []ShardConfig
	for i, s := range shards {
		out = append(out, ShardConfig{ID: fmt.Sprintf("shard-%d", i+1), Addr: s.Addr().String(), Slot: i + 1})
	}
	return out
}

func startProxy(t testing.TB, cfg Config) *Proxy {
	t.Helper()
	cfg.Listen, cfg.AdminListen = "127.0.0.1:0", "127.0.0.1:0"
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = p.Close(ctx)
	})
	return p
}

func newClient(t testing.TB, addr string) zbc.Client { return simtest.Client(t, addr) }

func eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func simMetric(t testing.TB, s *sim.Sim, name string, labels ...string) float64 {
	return simtest.SimMetric(t, s, name, labels...)
}

func proxyMetric(t testing.TB, p *Proxy, name string, labels ...string) float64 {
	return simtest.Metric(t, "http://"+p.AdminAddr().String()+"/metrics", name, labels...)
}

const bpmnHead = `<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL" xmlns:zeebe="http://camunda.org/schema/zeebe/1.0" id="d" targetNamespace="t">
`

// linearProcess is start -> one service task per type -> end.
func linearProcess(id string, types ...string) []byte {
	var b strings.Builder
	b.WriteString(bpmnHead)
	fmt.Fprintf(&b, `<bpmn:process id="%s" isExecutable="true"><bpmn:startEvent id="start"/>`, id)
	prev := "start"
	for i, typ := range types {
		task := fmt.Sprintf("t%d", i+1)
		fmt.Fprintf(&b, `<bpmn:serviceTask id="%s"><bpmn:extensionElements><zeebe:taskDefinition type="%s"/></bpmn:extensionElements></bpmn:serviceTask>`, task, typ)
		fmt.Fprintf(&b, `<bpmn:sequenceFlow id="f%s" sourceRef="%s" targetRef="%s"/>`, task, prev, task)
		prev = task
	}
	fmt.Fprintf(&b, `<bpmn:endEvent id="end"/><bpmn:sequenceFlow id="fend" sourceRef="%s" targetRef="end"/></bpmn:process></bpmn:definitions>`, prev)
	return []byte(b.String())
}
