package proxy

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/keyslot"
	"github.com/shardctl/shardctl/internal/load"
	"github.com/shardctl/shardctl/internal/proxy/route"
	"github.com/shardctl/shardctl/internal/sim"
	"github.com/shardctl/shardctl/internal/sim/simtest"
)

const catchProcess = bpmnHead + `<bpmn:message id="m" name="paid"><bpmn:extensionElements><zeebe:subscription correlationKey="=orderId"/></bpmn:extensionElements></bpmn:message>
<bpmn:process id="wait" isExecutable="true">
<bpmn:startEvent id="start"/>
<bpmn:intermediateCatchEvent id="waitPaid"><bpmn:messageEventDefinition messageRef="m"/></bpmn:intermediateCatchEvent>
<bpmn:endEvent id="end"/>
<bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="waitPaid"/>
<bpmn:sequenceFlow id="f2" sourceRef="waitPaid" targetRef="end"/>
</bpmn:process></bpmn:definitions>`

const messageStartProcess = bpmnHead + `<bpmn:message id="m" name="order-placed"/>
<bpmn:process id="order" isExecutable="true">
<bpmn:startEvent id="placed"><bpmn:messageEventDefinition messageRef="m"/></bpmn:startEvent>
<bpmn:endEvent id="end"/>
<bpmn:sequenceFlow id="f1" sourceRef="placed" targetRef="end"/>
</bpmn:process></bpmn:definitions>`

// It holds for the oldest and the newest Zeebe the simulator plays.
func TestMessagesThroughTheProxy(t *testing.T) { simtest.EachEnd(t, messagesThroughTheProxy) }

func messagesThroughTheProxy(t *testing.T, v sim.Version) {
	shards := simtest.StartN(t, 3, sim.Config{Partitions: 2, Version: v})
	p := startProxy(t, Config{Shards: simtest.ShardConfigs(shards)})
	c := newClient(t, p.Addr().String())
	ctx := budget.Context(t, time.Minute)
	for name, xml := range map[string]string{"wait.bpmn": catchProcess, "order.bpmn": messageStartProcess} {
		if _, err := c.NewDeployResourceCommand().AddResource([]byte(xml), name).Send(ctx); err != nil {
			t.Fatal(err)
		}
	}
	total := func(name string, labels ...string) float64 {
		var sum float64
		for _, s := range shards {
			sum += simMetric(t, s, name, labels...)
		}
		return sum
	}

	// Catch: instances wait on every shard; each message reaches them all.
	const n = 9
	slots := map[int]bool{}
	for i := range n {
		cmd, _ := c.NewCreateInstanceCommand().BPMNProcessId("wait").LatestVersion().VariablesFromMap(map[string]any{"orderId": fmt.Sprintf("o-%d", i)})
		r, err := cmd.Send(ctx)
		if err != nil {
			t.Fatal(err)
		}
		slot, _ := keyslot.Split(r.ProcessInstanceKey)
		slots[slot] = true
	}
	if len(slots) < 2 {
		t.Fatalf("waiting instances on slots %v only; the test needs them spread", slots)
	}
	for i := range n {
		if _, err := c.NewPublishMessageCommand().MessageName("paid").CorrelationKey(fmt.Sprintf("o-%d", i)).Send(ctx); err != nil {
			t.Fatal(err)
		}
	}
	budget.Eventually(t, 10*time.Second, "every waiting instance to get its message", func() bool {
		return total("zeebe_executed_instances_total", `action="completed"`) == n
	})

	// Start: a message that starts a process goes to one shard, so each
	// message starts exactly one instance in the federation.
	before := total("zeebe_executed_instances_total", `action="activated"`)
	for i := range n {
		if _, err := c.NewPublishMessageCommand().MessageName("order-placed").CorrelationKey(fmt.Sprintf("c-%d", i)).Send(ctx); err != nil {
			t.Fatal(err)
		}
	}
	budget.Eventually(t, 10*time.Second, "one instance per start message", func() bool {
		return total("zeebe_executed_instances_total", `action="activated"`)-before == n
	})
	time.Sleep(100 * time.Millisecond)
	if got := total("zeebe_executed_instances_total", `action="activated"`) - before; got != n {
		t.Errorf("%v instances started by %d messages, want one each", got, n)
	}

	// Signals reach every shard.
	if _, err := c.NewBroadcastSignalCommand().SignalName("nobody-listens").Send(ctx); err != nil {
		t.Errorf("signal: %v", err)
	}
}

func TestZbctlThroughTheProxy(t *testing.T) {
	zbctl := simtest.Zbctl(t)
	shards := simtest.StartN(t, 3, sim.Config{Partitions: 2})
	p := startProxy(t, Config{Shards: simtest.ShardConfigs(shards)})
	run := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), budget.Of(30*time.Second))
		defer cancel()
		cmd := exec.CommandContext(ctx, zbctl, append(args, "--address", p.Addr().String(), "--insecure")...)
		cmd.Env = []string{"HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH")}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("zbctl %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	status := run("status")
	for _, want := range []string{"Cluster size: 3", "Partitions count: 6", "shard-1/", "shard-2/", "shard-3/"} {
		if !strings.Contains(status, want) {
			t.Errorf("zbctl status through the proxy lacks %q:\n%s", want, status)
		}
	}
	file := filepath.Join(t.TempDir(), "p.bpmn")
	if err := os.WriteFile(file, load.Process("p", "a"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out := strings.Join(strings.Fields(run("deploy", "resource", file)), ""); !strings.Contains(out, `"bpmnProcessId":"p"`) {
		t.Errorf("deploy: %s", out)
	}
	if out := run("create", "instance", "p"); !strings.Contains(out, `"processInstanceKey"`) {
		t.Errorf("create instance: %s", out)
	}
}

// A message that fails on one shard is an error naming it, even when the
// others took it (the lowest slot's OK hid it before); the same for a
// signal. Health checks are off: the failing shard stays a target.
func TestFanOutReportsAShardThatFailed(t *testing.T) {
	shards := simtest.StartN(t, 3, sim.Config{Partitions: 1})
	p := startProxy(t, Config{Shards: simtest.ShardConfigs(shards), Health: route.HealthConfig{Interval: -1}})
	c := newClient(t, p.Addr().String())
	ctx := budget.Context(t, time.Minute)
	publish := func() error {
		_, err := c.NewPublishMessageCommand().MessageName("paid").CorrelationKey("order-1").TimeToLive(time.Minute).Send(ctx)
		return err
	}
	signal := func() error {
		_, err := c.NewBroadcastSignalCommand().SignalName("stop").Send(ctx)
		return err
	}
	if err := publish(); err != nil {
		t.Fatal(err)
	}
	shards[1].Refuse()
	for name, send := range map[string]func() error{"message": publish, "signal": signal} {
		err := send()
		if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "shard shard-2") || !strings.Contains(err.Error(), "reached: shard-1, shard-3") {
			t.Errorf("%s with shard-2 refusing: %v, want UNAVAILABLE naming shard-2 and the shards reached", name, err)
		}
	}
	if err := shards[1].Resume(); err != nil {
		t.Fatal(err)
	}
	budget.Eventually(t, 10*time.Second, "publishing to reach every shard again", func() bool { return publish() == nil })
}
