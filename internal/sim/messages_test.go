package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/shardctl/shardctl/internal/budget"
	pb "github.com/shardctl/shardctl/internal/gatewaypb"
)

const catchProcess = bpmnHead + `<bpmn:message id="m" name="paid"><bpmn:extensionElements><zeebe:subscription correlationKey="=orderId"/></bpmn:extensionElements></bpmn:message>
<bpmn:process id="wait" isExecutable="true">
<bpmn:startEvent id="start"/>
<bpmn:intermediateCatchEvent id="waitPaid"><bpmn:messageEventDefinition messageRef="m"/></bpmn:intermediateCatchEvent>
<bpmn:serviceTask id="ship"><bpmn:extensionElements><zeebe:taskDefinition type="ship"/></bpmn:extensionElements></bpmn:serviceTask>
<bpmn:endEvent id="end"/>
<bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="waitPaid"/>
<bpmn:sequenceFlow id="f2" sourceRef="waitPaid" targetRef="ship"/>
<bpmn:sequenceFlow id="f3" sourceRef="ship" targetRef="end"/>
</bpmn:process></bpmn:definitions>`

const messageStartProcess = bpmnHead + `<bpmn:message id="m" name="order-placed"/>
<bpmn:process id="order" isExecutable="true">
<bpmn:startEvent id="placed"><bpmn:messageEventDefinition messageRef="m"/></bpmn:startEvent>
<bpmn:serviceTask id="handle"><bpmn:extensionElements><zeebe:taskDefinition type="handle"/></bpmn:extensionElements></bpmn:serviceTask>
<bpmn:endEvent id="end"/>
<bpmn:sequenceFlow id="f1" sourceRef="placed" targetRef="handle"/>
<bpmn:sequenceFlow id="f2" sourceRef="handle" targetRef="end"/>
</bpmn:process></bpmn:definitions>`

func TestMessageCatch(t *testing.T) {
	s := startSim(t, Config{Partitions: 3})
	c := newClient(t, s)
	ctx := budget.Context(t, 30*time.Second)
	deploy(t, c, "wait.bpmn", []byte(catchProcess))

	// Instances on every partition wait for keys that hash to others.
	const n = 9
	for i := range n {
		create(t, c, "wait", map[string]any{"orderId": fmt.Sprintf("order-%d", i)})
	}
	budget.Eventually(t, 5*time.Second, "every subscription to open", func() bool {
		return len(onPartitions(t, s, func(p *partition) []msgKey {
			var ks []msgKey
			for k, subs := range p.state.subscriptions {
				for range subs {
					ks = append(ks, k)
				}
			}
			return ks
		})) == n
	})
	for i := range n {
		cmd, _ := c.NewPublishMessageCommand().MessageName("paid").CorrelationKey(fmt.Sprintf("order-%d", i)).VariablesFromMap(map[string]any{"amount": i})
		if _, err := cmd.Send(ctx); err != nil {
			t.Fatal(err)
		}
	}
	got := map[float64]bool{}
	budget.Eventually(t, 10*time.Second, "a ship job per instance", func() bool {
		for _, j := range activate(t, c, "ship", n, time.Minute) {
			vars, _ := j.GetVariablesAsMap()
			got[vars["amount"].(float64)] = true
		}
		return len(got) == n
	})
}

func TestMessageBufferTTLAndDedupe(t *testing.T) {
	s := startSim(t, Config{Partitions: 2, TimerInterval: 20 * time.Millisecond})
	c := newClient(t, s)
	ctx := budget.Context(t, 30*time.Second)
	deploy(t, c, "wait.bpmn", []byte(catchProcess))

	// Buffered with a TTL: an instance that starts waiting later gets it.
	if _, err := c.NewPublishMessageCommand().MessageName("paid").CorrelationKey("early").MessageId("m-1").TimeToLive(time.Minute).Send(ctx); err != nil {
		t.Fatal(err)
	}
	_, err := c.NewPublishMessageCommand().MessageName("paid").CorrelationKey("early").MessageId("m-1").TimeToLive(time.Minute).Send(ctx)
	if grpcCode(err) != codes.AlreadyExists {
		t.Errorf("same messageId twice: %v, want ALREADY_EXISTS", err)
	}
	// The id is per name and correlation key.
	if _, err := c.NewPublishMessageCommand().MessageName("paid").CorrelationKey("other").MessageId("m-1").Send(ctx); err != nil {
		t.Errorf("same id, other key: %v", err)
	}
	create(t, c, "wait", map[string]any{"orderId": "early"})
	activateOne(t, c, "ship")

	// A message correlates once per process: a second instance waiting on
	// the same key does not get the same buffered message.
	create(t, c, "wait", map[string]any{"orderId": "early"})
	time.Sleep(100 * time.Millisecond)
	if n := len(activate(t, c, "ship", 5, time.Minute)); n != 0 {
		t.Errorf("one message correlated to two instances of one process")
	}

	// Buffered messages are counted as Zeebe counts them, until they expire.
	buffered := scrape(t, s, "zeebe_buffered_messages_count")
	if buffered < 1 {
		t.Errorf("zeebe_buffered_messages_count %v with a message buffered for a minute", buffered)
	}

	// Expired: a later instance waits.
	if _, err := c.NewPublishMessageCommand().MessageName("paid").CorrelationKey("late").TimeToLive(50 * time.Millisecond).Send(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // past the TTL and a few timer runs
	budget.Eventually(t, 5*time.Second, "the expired message to leave the buffer count", func() bool {
		return scrape(t, s, "zeebe_buffered_messages_count") == buffered
	})
	create(t, c, "wait", map[string]any{"orderId": "late"})
	time.Sleep(100 * time.Millisecond)
	if n := len(activate(t, c, "ship", 5, time.Minute)); n != 0 {
		t.Errorf("an expired message correlated")
	}
	// Zero TTL: correlates to what waits now, is not kept.
	if _, err := c.NewPublishMessageCommand().MessageName("paid").CorrelationKey("late").Send(ctx); err != nil {
		t.Fatal(err)
	}
	activateOne(t, c, "ship")
}

func TestMessageStart(t *testing.T) {
	s := startSim(t, Config{Partitions: 3})
	c := newClient(t, s)
	ctx := budget.Context(t, 30*time.Second)
	deploy(t, c, "order.bpmn", []byte(messageStartProcess))

	cmd, _ := c.NewPublishMessageCommand().MessageName("order-placed").CorrelationKey("c-1").TimeToLive(time.Minute).VariablesFromMap(map[string]any{"customer": "c-1"})
	if _, err := cmd.Send(ctx); err != nil {
		t.Fatal(err)
	}
	job := activateOne(t, c, "handle")
	vars, _ := job.GetVariablesAsMap()
	if vars["customer"] != "c-1" || job.BpmnProcessId != "order" {
		t.Errorf("started instance: %+v %v", job, vars)
	}
	// While that instance is active, a second message with the same key
	// starts nothing; it is buffered and starts the next instance once
	// the first ends.
	if _, err := c.NewPublishMessageCommand().MessageName("order-placed").CorrelationKey("c-1").TimeToLive(time.Minute).Send(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(activate(t, c, "handle", 5, time.Minute)); n != 0 {
		t.Fatal("a second instance started for an active correlation key")
	}
	if _, err := c.NewCompleteJobCommand().JobKey(job.Key).Send(ctx); err != nil {
		t.Fatal(err)
	}
	next := activateOne(t, c, "handle")
	if next.ProcessInstanceKey == job.ProcessInstanceKey {
		t.Error("the buffered message did not start a new instance")
	}
	// Without a correlation key every message starts an instance.
	for range 3 {
		if _, err := c.NewPublishMessageCommand().MessageName("order-placed").CorrelationKey("").Send(ctx); err != nil {
			t.Fatal(err)
		}
	}
	budget.Eventually(t, 5*time.Second, "three more instances", func() bool {
		return scrape(t, s, "zeebe_executed_instances_total", `action="activated"`) == 5
	})
}

const signalProcesses = bpmnHead + `<bpmn:signal id="s" name="audit"/>
<bpmn:process id="audit" isExecutable="true">
<bpmn:startEvent id="start"><bpmn:signalEventDefinition signalRef="s"/></bpmn:startEvent>
<bpmn:endEvent id="end"/>
<bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="end"/>
</bpmn:process>
<bpmn:process id="hold" isExecutable="true">
<bpmn:startEvent id="hs"/>
<bpmn:intermediateCatchEvent id="release"><bpmn:signalEventDefinition signalRef="s"/></bpmn:intermediateCatchEvent>
<bpmn:endEvent id="he"/>
<bpmn:sequenceFlow id="h1" sourceRef="hs" targetRef="release"/>
<bpmn:sequenceFlow id="h2" sourceRef="release" targetRef="he"/>
</bpmn:process></bpmn:definitions>`

func TestSignals(t *testing.T) {
	s := startSim(t, Config{Partitions: 3})
	c := newClient(t, s)
	ctx := budget.Context(t, 30*time.Second)
	deploy(t, c, "signals.bpmn", []byte(signalProcesses))
	for range 6 {
		create(t, c, "hold", nil)
	}
	if n := activeInstances(t, s); n != 6 {
		t.Fatalf("%d active instances, want 6 waiting", n)
	}
	resp, err := c.NewBroadcastSignalCommand().SignalName("audit").Send(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if PartitionOfKey(resp.GetKey()) != 1 {
		t.Errorf("signal key %d not from partition 1", resp.GetKey())
	}
	budget.Eventually(t, 5*time.Second, "every waiting instance to end", func() bool { return activeInstances(t, s) == 0 })
	// Six held instances ended, and the signal started one audit instance
	// in the cluster (not one per partition).
	if got := scrape(t, s, "zeebe_executed_instances_total", `action="completed"`); got != 7 {
		t.Errorf("completed instances = %v, want 7", got)
	}
}

func TestCancelAndSetVariables(t *testing.T) {
	s := startSim(t, Config{Partitions: 2})
	c := newClient(t, s)
	ctx := budget.Context(t, 30*time.Second)
	deploy(t, c, "wait.bpmn", []byte(catchProcess))
	deploy(t, c, "p.bpmn", linearProcess("p", 3, "work"))

	inst := create(t, c, "p", nil)
	job := activateOne(t, c, "work")
	sv, _ := c.NewSetVariablesCommand().ElementInstanceKey(inst).VariablesFromMap(map[string]any{"approved": true})
	if resp, err := sv.Send(ctx); err != nil || resp.GetKey() == 0 {
		t.Fatalf("set variables: %v, %v", resp, err)
	}
	sv, _ = c.NewSetVariablesCommand().ElementInstanceKey(job.ElementInstanceKey).VariablesFromMap(map[string]any{"step": 2})
	if _, err := sv.Send(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.NewCancelInstanceCommand().ProcessInstanceKey(inst).Send(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.NewCompleteJobCommand().JobKey(job.Key).Send(ctx); grpcCode(err) != codes.NotFound {
		t.Errorf("completing a cancelled instance's job: %v, want NOT_FOUND", err)
	}
	if _, err := c.NewCancelInstanceCommand().ProcessInstanceKey(inst).Send(ctx); grpcCode(err) != codes.NotFound {
		t.Errorf("cancelling twice: %v, want NOT_FOUND", err)
	}
	sv, _ = c.NewSetVariablesCommand().ElementInstanceKey(inst).VariablesFromMap(map[string]any{"x": 1})
	if _, err := sv.Send(ctx); grpcCode(err) != codes.NotFound {
		t.Errorf("variables on a cancelled instance: %v, want NOT_FOUND", err)
	}
	if got := scrape(t, s, "zeebe_job_events_total", `action="canceled"`); got != 1 {
		t.Errorf("canceled jobs = %v", got)
	}

	// A cancelled catch event withdraws its subscription: the message is
	// then buffered for nobody.
	w := create(t, c, "wait", map[string]any{"orderId": "gone"})
	if _, err := c.NewCancelInstanceCommand().ProcessInstanceKey(w).Send(ctx); err != nil {
		t.Fatal(err)
	}
	budget.Eventually(t, 5*time.Second, "the subscription to close", func() bool {
		return len(onPartitions(t, s, func(p *partition) []int { return make([]int, len(p.state.subscriptions)) })) == 0
	})
}

const gatewayProcess = bpmnHead + `<bpmn:process id="route" isExecutable="true">
<bpmn:startEvent id="start"/>
<bpmn:exclusiveGateway id="size"/>
<bpmn:serviceTask id="big"><bpmn:extensionElements><zeebe:taskDefinition type="big"/></bpmn:extensionElements></bpmn:serviceTask>
<bpmn:serviceTask id="small"><bpmn:extensionElements><zeebe:taskDefinition type="small"/></bpmn:extensionElements></bpmn:serviceTask>
<bpmn:parallelGateway id="fork"/><bpmn:parallelGateway id="join"/>
<bpmn:serviceTask id="a"><bpmn:extensionElements><zeebe:taskDefinition type="a"/></bpmn:extensionElements></bpmn:serviceTask>
<bpmn:serviceTask id="b"><bpmn:extensionElements><zeebe:taskDefinition type="b"/></bpmn:extensionElements></bpmn:serviceTask>
<bpmn:endEvent id="end"/><bpmn:endEvent id="end2"/>
<bpmn:sequenceFlow id="f0" sourceRef="start" targetRef="size"/>
<bpmn:sequenceFlow id="toBig" sourceRef="size" targetRef="big"><bpmn:conditionExpression xsi:type="bpmn:tFormalExpression">= amount &gt; 100</bpmn:conditionExpression></bpmn:sequenceFlow>
<bpmn:sequenceFlow id="toSmall" sourceRef="size" targetRef="small"><bpmn:conditionExpression xsi:type="bpmn:tFormalExpression">= amount &lt;= 100</bpmn:conditionExpression></bpmn:sequenceFlow>
<bpmn:sequenceFlow id="f1" sourceRef="big" targetRef="fork"/>
<bpmn:sequenceFlow id="f2" sourceRef="fork" targetRef="a"/>
<bpmn:sequenceFlow id="f3" sourceRef="fork" targetRef="b"/>
<bpmn:sequenceFlow id="f4" sourceRef="a" targetRef="join"/>
<bpmn:sequenceFlow id="f5" sourceRef="b" targetRef="join"/>
<bpmn:sequenceFlow id="f6" sourceRef="join" targetRef="end"/>
<bpmn:sequenceFlow id="f7" sourceRef="small" targetRef="end2"/>
</bpmn:process></bpmn:definitions>`

func TestGatewaysAndIncidentOnCondition(t *testing.T) {
	s := startSim(t, Config{Partitions: 1})
	c := newClient(t, s)
	ctx := budget.Context(t, 30*time.Second)
	deploy(t, c, "route.bpmn", []byte(gatewayProcess))

	create(t, c, "route", map[string]any{"amount": 50})
	small := activateOne(t, c, "small")
	if _, err := c.NewCompleteJobCommand().JobKey(small.Key).Send(ctx); err != nil {
		t.Fatal(err)
	}

	// Parallel branches join before the end.
	create(t, c, "route", map[string]any{"amount": 500})
	big := activateOne(t, c, "big")
	if _, err := c.NewCompleteJobCommand().JobKey(big.Key).Send(ctx); err != nil {
		t.Fatal(err)
	}
	a, b := activateOne(t, c, "a"), activateOne(t, c, "b")
	if _, err := c.NewCompleteJobCommand().JobKey(a.Key).Send(ctx); err != nil {
		t.Fatal(err)
	}
	if activeInstances(t, s) != 1 {
		t.Fatal("the instance ended with one parallel branch still open")
	}
	if _, err := c.NewCompleteJobCommand().JobKey(b.Key).Send(ctx); err != nil {
		t.Fatal(err)
	}
	budget.Eventually(t, 5*time.Second, "the joined instance to end", func() bool { return activeInstances(t, s) == 0 })

	// No condition holds and there is no default flow: an incident; set
	// the variable and resolve, and the gateway decides again.
	inst := create(t, c, "route", map[string]any{"amount": "unknown"})
	incidents := incidentKeys(t, s)
	if len(incidents) != 1 {
		t.Fatalf("incidents %v", incidents)
	}
	sv, _ := c.NewSetVariablesCommand().ElementInstanceKey(inst).VariablesFromMap(map[string]any{"amount": 1})
	if _, err := sv.Send(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.NewResolveIncidentCommand().IncidentKey(incidents[0]).Send(ctx); err != nil {
		t.Fatal(err)
	}
	activateOne(t, c, "small")
}

func TestCreateWithResult(t *testing.T) {
	s := startSim(t, Config{Partitions: 2})
	c := newClient(t, s)
	deploy(t, c, "p.bpmn", linearProcess("p", 3, "calc"))
	go func() {
		j := activateOne(t, c, "calc")
		cmd, _ := c.NewCompleteJobCommand().JobKey(j.Key).VariablesFromMap(map[string]any{"result": 42, "noise": "x"})
		_, _ = cmd.Send(context.Background())
	}()
	cmd, _ := c.NewCreateInstanceCommand().BPMNProcessId("p").LatestVersion().VariablesFromMap(map[string]any{"input": 1})
	ctx := budget.Context(t, 20*time.Second)
	res, err := cmd.WithResult().FetchVariables("result", "input").Send(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var vars map[string]any
	if err := json.Unmarshal([]byte(res.GetVariables()), &vars); err != nil {
		t.Fatal(err)
	}
	if vars["result"] != 42.0 || vars["input"] != 1.0 || vars["noise"] != nil {
		t.Errorf("result variables %v", vars)
	}
	// Nobody works the job: the result does not come in time.
	_, err = pb.NewGatewayClient(dial(t, s)).CreateProcessInstanceWithResult(ctx, &pb.CreateProcessInstanceWithResultRequest{
		Request:        &pb.CreateProcessInstanceRequest{BpmnProcessId: "p", Version: -1},
		RequestTimeout: 300,
	})
	if grpcCode(err) != codes.DeadlineExceeded {
		t.Errorf("no result in time: %v, want DEADLINE_EXCEEDED", err)
	}
}
