package bpmn

import (
	"os"
	"strings"
	"testing"
	"time"
)

func TestParseOrder(t *testing.T) {
	data, err := os.ReadFile("testdata/order.bpmn")
	if err != nil {
		t.Fatal(err)
	}
	procs, err := Parse("order.bpmn", data)
	if err != nil {
		t.Fatal(err)
	}
	if len(procs) != 1 {
		t.Fatalf("%d processes, want 1", len(procs))
	}
	p := procs[0]
	if p.ID != "order" || p.NoneStart == nil || p.NoneStart.ID != "start" {
		t.Fatalf("process %q, none start %v", p.ID, p.NoneStart)
	}
	if len(p.MessageStarts) != 1 || p.MessageStarts[0].MessageName != "order-placed" {
		t.Errorf("message starts: %+v", p.MessageStarts)
	}
	if len(p.SignalStarts) != 1 || p.SignalStarts[0].SignalName != "audit" {
		t.Errorf("signal starts: %+v", p.SignalStarts)
	}
	reserve := p.Elements["reserve"]
	if reserve.Kind != ServiceTask || reserve.JobType != "reserve" || reserve.Retries != 5 {
		t.Errorf("reserve: %+v", reserve)
	}
	if len(reserve.Boundaries) != 1 || reserve.Boundaries[0].ErrorCode != "NO_STOCK" {
		t.Errorf("reserve boundaries: %+v", reserve.Boundaries)
	}
	if got := p.Elements["approve"]; got.JobType != "approve" || got.Retries != 3 {
		t.Errorf("approve: type %q retries %d (want the static expression unwrapped, default retries 3)", got.JobType, got.Retries)
	}
	gw := p.Elements["big"]
	if gw.Default == nil || gw.Default.ID != "small" || len(gw.Outgoing) != 2 {
		t.Errorf("gateway: %+v", gw)
	}
	wait := p.Elements["waitPaid"]
	if wait.MessageName != "payment-received" || strings.Join(wait.CorrelationKey, ".") != "orderId" {
		t.Errorf("catch event: %+v", wait)
	}
	if j := p.Elements["join"]; len(j.Incoming) != 2 {
		t.Errorf("join has %d incoming flows", len(j.Incoming))
	}
}

const head = `<?xml version="1.0"?><definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL" xmlns:zeebe="http://camunda.org/schema/zeebe/1.0">`

// A conditional start event (started by EvaluateConditional, 8.9) holds
// its condition; a process may have it as its only start.
func TestParseConditionalStart(t *testing.T) {
	procs, err := Parse("c.bpmn", []byte(head+`<process id="p" isExecutable="true"><startEvent id="big"><conditionalEventDefinition><condition xsi:type="bpmn:tFormalExpression">= amount &gt; 100</condition></conditionalEventDefinition></startEvent><endEvent id="e"/><sequenceFlow id="f" sourceRef="big" targetRef="e"/></process></definitions>`))
	if err != nil {
		t.Fatal(err)
	}
	p := procs[0]
	if p.NoneStart != nil || len(p.ConditionalStarts) != 1 || p.ConditionalStarts[0].ID != "big" {
		t.Fatalf("starts: none %v, conditional %+v", p.NoneStart, p.ConditionalStarts)
	}
	c := p.ConditionalStarts[0].Condition
	if !c.Eval(map[string]any{"amount": 101.0}) || c.Eval(map[string]any{"amount": 100.0}) || c.Eval(nil) {
		t.Errorf("condition %s evaluates wrongly", c)
	}
}

func TestParseRejects(t *testing.T) {
	tests := []struct {
		name, xml, want string
	}{
		{"not xml", `{"json": true}`, "not well-formed XML"},
		{"truncated", head + `<process id="p" isExecutable="true">`, "not well-formed XML"},
		{"wrong root", `<html/>`, "expected a BPMN <definitions>"},
		{"no executable process", head + `<process id="p" isExecutable="false"/></definitions>`, "at least one executable process"},
		{"user task", head + `<process id="p" isExecutable="true"><startEvent id="s"/><userTask id="approveByHand"/><sequenceFlow id="f" sourceRef="s" targetRef="approveByHand"/></process></definitions>`,
			"element 'approveByHand' of type <userTask> in process 'p' is not supported"},
		{"timer start", head + `<process id="p" isExecutable="true"><startEvent id="tick"><timerEventDefinition/></startEvent></process></definitions>`,
			"start event 'tick' with <timerEventDefinition> is not supported"},
		{"conditional start without condition", head + `<process id="p" isExecutable="true"><startEvent id="when"><conditionalEventDefinition/></startEvent><endEvent id="e"/><sequenceFlow id="f" sourceRef="when" targetRef="e"/></process></definitions>`,
			"conditional start event 'when' must have a condition"},
		{"conditional start with a bad condition", head + `<process id="p" isExecutable="true"><startEvent id="when"><conditionalEventDefinition><condition>a > 1</condition></conditionalEventDefinition></startEvent><endEvent id="e"/><sequenceFlow id="f" sourceRef="when" targetRef="e"/></process></definitions>`,
			"conditional start event 'when': condition \"a > 1\" is not an expression"},
		{"task without type", head + `<process id="p" isExecutable="true"><startEvent id="s"/><serviceTask id="t"/><sequenceFlow id="f" sourceRef="s" targetRef="t"/></process></definitions>`,
			"service task 't' must have a zeebe:taskDefinition"},
		{"blank job type", head + `<process id="p" isExecutable="true"><startEvent id="s"/><serviceTask id="t"><extensionElements><zeebe:taskDefinition type=" "/></extensionElements></serviceTask></process></definitions>`,
			"zeebe:taskDefinition must have a type"},
		{"dangling flow", head + `<process id="p" isExecutable="true"><startEvent id="s"/><endEvent id="e"/><sequenceFlow id="f" sourceRef="s" targetRef="nowhere"/></process></definitions>`,
			"sequence flow 'f' connects unknown elements"},
		{"no start", head + `<process id="p" isExecutable="true"><endEvent id="e"/></process></definitions>`, "has no incoming sequence flow"},
		{"dead end", head + `<process id="p" isExecutable="true"><startEvent id="s"/></process></definitions>`, "element 's' has no outgoing sequence flow"},
		{"unconditioned gateway flow", head + `<process id="p" isExecutable="true"><startEvent id="s"/><exclusiveGateway id="g"/><endEvent id="a"/><endEvent id="b"/>
			<sequenceFlow id="f0" sourceRef="s" targetRef="g"/><sequenceFlow id="fa" sourceRef="g" targetRef="a"/><sequenceFlow id="fb" sourceRef="g" targetRef="b"/></process></definitions>`,
			"sequence flow 'fa' leaving exclusive gateway 'g' needs a condition"},
		{"bad condition", head + `<process id="p" isExecutable="true"><startEvent id="s"/><endEvent id="e"/><sequenceFlow id="f" sourceRef="s" targetRef="e"><conditionExpression>= a ~ 1</conditionExpression></sequenceFlow></process></definitions>`,
			"sequence flow 'f'"},
		{"catch without correlation key", head + `<message id="m" name="x"/><process id="p" isExecutable="true"><startEvent id="s"/><intermediateCatchEvent id="c"><messageEventDefinition messageRef="m"/></intermediateCatchEvent><endEvent id="e"/>
			<sequenceFlow id="f1" sourceRef="s" targetRef="c"/><sequenceFlow id="f2" sourceRef="c" targetRef="e"/></process></definitions>`,
			"message catch event 'c': message 'm' must have a zeebe:subscription correlationKey"},
		{"duplicate id", head + `<process id="p" isExecutable="true"><startEvent id="s"/><endEvent id="s"/></process></definitions>`, "two elements with id 's'"},
		{"two none starts", head + `<process id="p" isExecutable="true"><startEvent id="a"/><startEvent id="b"/><endEvent id="e"/><sequenceFlow id="f1" sourceRef="a" targetRef="e"/><sequenceFlow id="f2" sourceRef="b" targetRef="e"/></process></definitions>`,
			"more than one none start event"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("x.bpmn", []byte(tt.xml))
			if err == nil {
				t.Fatalf("accepted; want an error containing %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not contain %q", err, tt.want)
			}
			if !strings.Contains(err.Error(), "'x.bpmn'") {
				t.Errorf("error %q does not name the resource", err)
			}
		})
	}
}

func TestCondition(t *testing.T) {
	vars := map[string]any{"amount": 150.0, "vip": false, "status": "open", "customer": map[string]any{"tier": "gold"}, "flag": true}
	tests := []struct {
		expr string
		want bool
	}{
		{"= amount > 100", true},
		{"= amount >= 150", true},
		{"= amount < 100", false},
		{"=amount=150", true},
		{`= status = "open"`, true},
		{`= status != "open"`, false},
		{`= customer.tier = "gold"`, true},
		{"= flag", true},
		{"= vip", false},
		{"= missing = null", true},
		{"= missing > 1", false},
		{`= amount = "150"`, false},
		{"= amount > 100 and vip = true", false},
		{"= amount > 1000 or flag", true},
		{"= amount > 1000 or vip and flag", false},
		{`= amount > 100 and status = "open" or vip`, true},
	}
	for _, tt := range tests {
		c, err := ParseCondition(tt.expr)
		if err != nil {
			t.Errorf("ParseCondition(%q): %v", tt.expr, err)
			continue
		}
		if got := c.Eval(vars); got != tt.want {
			t.Errorf("%q = %v, want %v", tt.expr, got, tt.want)
		}
	}
	for _, bad := range []string{"amount > 1", "=", "= a >", "= a ! b", `= a = "x`, "= 1 = a", "= a > 1 and", "= a b", "= a = x"} {
		if _, err := ParseCondition(bad); err == nil {
			t.Errorf("ParseCondition(%q) accepted", bad)
		}
	}
}

func FuzzParse(f *testing.F) {
	seed, _ := os.ReadFile("testdata/order.bpmn")
	f.Add(seed)
	f.Add([]byte(head + `<process id="p" isExecutable="true"><startEvent id="s"/></process></definitions>`))
	f.Add([]byte("<definitions><process"))
	f.Add(timerProcess(timeDuration("P1W2DT3H4M5.6S")))
	f.Fuzz(func(t *testing.T, data []byte) {
		procs, err := Parse("fuzz.bpmn", data)
		if err == nil && len(procs) == 0 {
			t.Fatal("no error and no process")
		}
		for _, p := range procs {
			if p.NoneStart == nil && len(p.MessageStarts) == 0 && len(p.SignalStarts) == 0 && len(p.ConditionalStarts) == 0 {
				t.Fatal("accepted a process without a start event")
			}
		}
	})
}

func FuzzCondition(f *testing.F) {
	for _, s := range []string{"= a > 1", `= a = "x" or b`, "= a.b.c != null and d <= -1.5e3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, expr string) {
		c, err := ParseCondition(expr)
		if err == nil {
			c.Eval(map[string]any{"a": 1.0, "b": true, "x": "y"})
		}
	})
}

func TestMessageStartNames(t *testing.T) {
	data, _ := os.ReadFile("testdata/order.bpmn")
	if got := MessageStartNames(data); len(got) != 1 || got[0] != "order-placed" {
		t.Errorf("MessageStartNames(order) = %q", got)
	}
	// Elements the simulator does not run are no obstacle here.
	withUserTask := strings.Replace(string(data), `<bpmn:endEvent id="done" />`, `<bpmn:userTask id="done" />`, 1)
	if got := MessageStartNames([]byte(withUserTask)); len(got) != 1 {
		t.Errorf("with a user task: %q", got)
	}
	if got := MessageStartNames([]byte("not xml")); got != nil {
		t.Errorf("not XML: %q", got)
	}
}

// timerProcess is start -> a -> wait (a timer catch event whose
// timerEventDefinition is def) -> b -> end, with the bpmn: prefix modelers
// write.
func timerProcess(def string) []byte {
	return []byte(`<?xml version="1.0"?><bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL" xmlns:zeebe="http://camunda.org/schema/zeebe/1.0" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">
<bpmn:process id="p" isExecutable="true"><bpmn:startEvent id="s"/>
<bpmn:serviceTask id="a"><bpmn:extensionElements><zeebe:taskDefinition type="a"/></bpmn:extensionElements></bpmn:serviceTask>
<bpmn:intermediateCatchEvent id="wait">` + def + `</bpmn:intermediateCatchEvent>
<bpmn:serviceTask id="b"><bpmn:extensionElements><zeebe:taskDefinition type="b"/></bpmn:extensionElements></bpmn:serviceTask>
<bpmn:endEvent id="e"/>
<bpmn:sequenceFlow id="f1" sourceRef="s" targetRef="a"/><bpmn:sequenceFlow id="f2" sourceRef="a" targetRef="wait"/>
<bpmn:sequenceFlow id="f3" sourceRef="wait" targetRef="b"/><bpmn:sequenceFlow id="f4" sourceRef="b" targetRef="e"/>
</bpmn:process></bpmn:definitions>`)
}

func timeDuration(text string) string {
	return `<bpmn:timerEventDefinition id="td"><bpmn:timeDuration xsi:type="bpmn:tFormalExpression">` + text + `</bpmn:timeDuration></bpmn:timerEventDefinition>`
}

func TestParseTimerCatchEvent(t *testing.T) {
	tests := []struct {
		name, def string
		want      time.Duration
	}{
		{"minutes", timeDuration("PT10M"), 10 * time.Minute},
		{"fraction of a second", timeDuration("PT0.5S"), 500 * time.Millisecond},
		{"comma as the decimal mark", timeDuration("PT1,25S"), 1250 * time.Millisecond},
		{"nanoseconds", timeDuration("PT0.000000001S"), time.Nanosecond},
		{"a day", timeDuration("P1D"), 24 * time.Hour},
		{"hours and minutes", timeDuration("PT1H30M"), 90 * time.Minute},
		{"every field", timeDuration("P1W2DT3H4M5.6S"), 9*24*time.Hour + 3*time.Hour + 4*time.Minute + 5600*time.Millisecond},
		{"more minutes than an hour has", timeDuration("PT90M"), 90 * time.Minute},
		{"zero", timeDuration("PT0S"), 0},
		{"lower case", timeDuration("pt2m"), 2 * time.Minute},
		{"whitespace around it", timeDuration("\n  PT3S\n"), 3 * time.Second},
		{"a static FEEL string", timeDuration(`="PT10M"`), 10 * time.Minute},
		{"no xsi:type, no prefix", `<timerEventDefinition><timeDuration>PT1S</timeDuration></timerEventDefinition>`, time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			procs, err := Parse("t.bpmn", timerProcess(tt.def))
			if err != nil {
				t.Fatal(err)
			}
			wait := procs[0].Elements["wait"]
			if wait.Kind != TimerCatchEvent || wait.TimerDuration != tt.want {
				t.Errorf("wait: kind %d, duration %v; want a timer catch event of %v", wait.Kind, wait.TimerDuration, tt.want)
			}
			if got := wait.Kind.BpmnElementType(); got != "INTERMEDIATE_CATCH_EVENT" {
				t.Errorf("element type %s", got)
			}
			if len(wait.Incoming) != 1 || len(wait.Outgoing) != 1 || wait.Outgoing[0].Target.ID != "b" {
				t.Errorf("wait is not linked between a and b: %+v", wait)
			}
		})
	}
}

func TestParseTimerCatchEventRejects(t *testing.T) {
	tests := []struct {
		name, def, want string
	}{
		{"FEEL expression", timeDuration(`=duration("PT" + string(minutes) + "M")`),
			`intermediate timer catch event 'wait': the expression "=duration(\"PT\" + string(minutes) + \"M\")" is not supported by the simulator`},
		{"FEEL variable", timeDuration("= wait"), "intermediate timer catch event 'wait': the expression \"= wait\" is not supported by the simulator"},
		{"time date", `<bpmn:timerEventDefinition><bpmn:timeDate>2030-01-01T00:00:00Z</bpmn:timeDate></bpmn:timerEventDefinition>`,
			"intermediate timer catch event 'wait' with <timeDate> is not supported by the simulator"},
		{"time cycle", `<bpmn:timerEventDefinition><bpmn:timeCycle>R3/PT10M</bpmn:timeCycle></bpmn:timerEventDefinition>`,
			"intermediate timer catch event 'wait' with <timeCycle> is not supported by the simulator"},
		{"no timer", `<bpmn:timerEventDefinition/>`, "intermediate timer catch event 'wait' must have a <timeDuration>"},
		{"months", timeDuration("P1M"), `intermediate timer catch event 'wait': duration "P1M": years and months are not supported by the simulator`},
		{"years", timeDuration("P1Y2D"), "years and months are not supported by the simulator"},
		{"empty", timeDuration(""), `"" is not an ISO-8601 duration`},
		{"no P", timeDuration("10M"), `"10M" is not an ISO-8601 duration`},
		{"only P", timeDuration("P"), `"P" is not an ISO-8601 duration`},
		{"nothing after T", timeDuration("P1DT"), "nothing follows T"},
		{"no number", timeDuration("PTS"), "expected a number"},
		{"negative", timeDuration("PT-5S"), "expected a number"},
		{"out of order", timeDuration("PT5S1M"), `unexpected "M"`},
		{"repeated", timeDuration("PT1M1M"), `unexpected "M"`},
		{"hours in the date part", timeDuration("P1H"), `unexpected "H"`},
		{"fraction of a minute", timeDuration("PT1.5M"), "only seconds may have a fraction"},
		{"two decimal marks", timeDuration("PT1.5.1S"), "bad number"},
		{"more than nine fraction digits", timeDuration("PT0.0000000001S"), "bad number"},
		{"too long", timeDuration("P999999999D"), "too large"},
		{"too long in sum", timeDuration("P15000WT9223372036S"), "is too long"},
		{"no designator", timeDuration("PT5"), `"5" has no designator after it`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("t.bpmn", timerProcess(tt.def))
			if err == nil {
				t.Fatalf("accepted; want an error containing %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "'t.bpmn'") {
				t.Errorf("error %q does not name the resource or does not contain %q", err, tt.want)
			}
		})
	}
}

func FuzzParseDuration(f *testing.F) {
	for _, s := range []string{"PT10M", "P1W2DT3H4M5.123456789S", "PT1,5S", "P1M", "PT"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if d, err := parseDuration(s); err == nil && d < 0 {
			t.Fatalf("%q = %v: negative", s, d)
		}
	})
}
