// Package bpmn parses the BPMN subset the shard simulator executes: none,
// message and signal start events; end events; service tasks
// (zeebe:taskDefinition type, retries); sequence flows; exclusive gateways
// with simple conditions and a default flow; parallel gateways;
// intermediate message catch events (zeebe:subscription correlationKey),
// signal catch events and timer catch events with an ISO-8601
// timeDuration; and error boundary events. Anything else is rejected with an error that
// names the element, as Zeebe rejects a deployment it cannot execute.
// It imports nothing of this module.
package bpmn

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Kind is what an element does.
type Kind int

const (
	StartEvent Kind = iota + 1
	EndEvent
	ServiceTask
	ExclusiveGateway
	ParallelGateway
	MessageCatchEvent
	ErrorBoundaryEvent
	SignalCatchEvent
	TimerCatchEvent
)

// BpmnElementType returns Zeebe's element type name, as metrics and
// records label it.
func (k Kind) BpmnElementType() string {
	switch k {
	case StartEvent:
		return "START_EVENT"
	case EndEvent:
		return "END_EVENT"
	case ServiceTask:
		return "SERVICE_TASK"
	case ExclusiveGateway:
		return "EXCLUSIVE_GATEWAY"
	case ParallelGateway:
		return "PARALLEL_GATEWAY"
	case MessageCatchEvent, SignalCatchEvent, TimerCatchEvent:
		return "INTERMEDIATE_CATCH_EVENT"
	case ErrorBoundaryEvent:
		return "BOUNDARY_EVENT"
	}
	return "UNSPECIFIED"
}

// Trigger is what starts a start event.
type Trigger int

const (
	None Trigger = iota
	Message
	Signal
	// Conditional: started by EvaluateConditional (8.9) when the
	// condition holds for the variables given.
	Conditional
)

// Element is one flow node.
type Element struct {
	ID       string
	Kind     Kind
	Trigger  Trigger // start events
	Incoming []*Flow
	Outgoing []*Flow
	Default  *Flow // exclusive gateway

	// Service task.
	JobType string
	Retries int32

	// Message start / catch: the message name; catch events also have the
	// correlation key expression, a variable path.
	MessageName    string
	CorrelationKey []string
	// Signal start and catch.
	SignalName string
	// Timer catch: how long it waits once activated.
	TimerDuration time.Duration
	// Conditional start: when it starts an instance.
	Condition *Condition

	// Error boundary: the task it is attached to and the error code it
	// catches ("" catches every code).
	AttachedTo     string
	ErrorCode      string
	CancelActivity bool

	// Boundaries attached to this service task.
	Boundaries []*Element
}

// Flow is a sequence flow.
type Flow struct {
	ID        string
	Source    *Element
	Target    *Element
	Condition *Condition
}

// Process is one executable process of a deployed resource.
type Process struct {
	ID       string // bpmnProcessId
	Name     string
	Elements map[string]*Element
	// NoneStart is the start event CreateProcessInstance uses, if any.
	NoneStart         *Element
	MessageStarts     []*Element
	SignalStarts      []*Element
	ConditionalStarts []*Element
}

// Error is a deployment the simulator rejects; Message names the element.
type Error struct{ Message string }

func (e *Error) Error() string { return e.Message }

func errorf(format string, a ...any) error { return &Error{Message: fmt.Sprintf(format, a...)} }

// Parse reads a BPMN 2.0 XML resource and returns its executable
// processes. resourceName is used in error messages.
func Parse(resourceName string, data []byte) ([]*Process, error) {
	root, err := parseTree(data)
	if err != nil {
		return nil, errorf("'%s': %v", resourceName, err)
	}
	if root.name != "definitions" {
		return nil, errorf("'%s': expected a BPMN <definitions> root element, found <%s>", resourceName, root.name)
	}
	p := parser{resource: resourceName, messages: map[string]string{}, subscriptions: map[string]string{}, signals: map[string]string{}, errors: map[string]string{}}
	for _, c := range root.children {
		switch c.name {
		case "message":
			p.messages[c.attr("id")] = c.attr("name")
			if ext := c.child("extensionElements"); ext != nil {
				if sub := ext.child("subscription"); sub != nil {
					p.subscriptions[c.attr("id")] = sub.attr("correlationKey")
				}
			}
		case "signal":
			p.signals[c.attr("id")] = c.attr("name")
		case "error":
			p.errors[c.attr("id")] = c.attr("errorCode")
		}
	}
	var out []*Process
	for _, c := range root.children {
		switch c.name {
		case "process":
			if c.attr("isExecutable") != "true" {
				continue
			}
			proc, err := p.process(c)
			if err != nil {
				return nil, err
			}
			out = append(out, proc)
		case "message", "signal", "error", "BPMNDiagram", "documentation", "extensionElements", "collaboration", "escalation":
			// collaboration: pools drawn around processes; nothing to run.
		default:
			return nil, errorf("'%s': element <%s> is not supported by the simulator", resourceName, c.name)
		}
	}
	if len(out) == 0 {
		return nil, errorf("'%s': must contain at least one executable process", resourceName)
	}
	return out, nil
}

type parser struct {
	resource string
	// By id: message names, their zeebe:subscription correlationKey,
	// signal names and error codes.
	messages, subscriptions, signals, errors map[string]string
}

func (p *parser) fail(format string, a ...any) error {
	return errorf("'%s': %s", p.resource, fmt.Sprintf(format, a...))
}

func (p *parser) process(n *node) (*Process, error) {
	id := n.attr("id")
	if id == "" {
		return nil, p.fail("a process has no id")
	}
	proc := &Process{ID: id, Name: n.attr("name"), Elements: map[string]*Element{}}
	var flows []*node
	for _, c := range n.children {
		var el *Element
		var err error
		switch c.name {
		case "sequenceFlow":
			flows = append(flows, c)
			continue
		case "extensionElements", "documentation", "laneSet", "textAnnotation", "association":
			continue
		case "startEvent":
			el, err = p.startEvent(c)
		case "endEvent":
			el, err = p.endEvent(c)
		case "serviceTask":
			el, err = p.serviceTask(c)
		case "exclusiveGateway":
			el = &Element{Kind: ExclusiveGateway}
		case "parallelGateway":
			el = &Element{Kind: ParallelGateway}
		case "intermediateCatchEvent":
			el, err = p.catchEvent(c)
		case "boundaryEvent":
			el, err = p.boundaryEvent(c)
		default:
			return nil, p.fail("element '%s' of type <%s> in process '%s' is not supported by the simulator", c.attr("id"), c.name, id)
		}
		if err != nil {
			return nil, err
		}
		el.ID = c.attr("id")
		if el.ID == "" {
			return nil, p.fail("a <%s> in process '%s' has no id", c.name, id)
		}
		if _, dup := proc.Elements[el.ID]; dup {
			return nil, p.fail("process '%s' has two elements with id '%s'", id, el.ID)
		}
		proc.Elements[el.ID] = el
		if el.Kind == ExclusiveGateway {
			el.Default = &Flow{ID: c.attr("default")} // resolved below
		}
	}
	flowsByID := map[string]*Flow{}
	for _, f := range flows {
		fl, err := p.flow(proc, f)
		if err != nil {
			return nil, err
		}
		if _, dup := flowsByID[fl.ID]; dup || proc.Elements[fl.ID] != nil {
			return nil, p.fail("process '%s' has two elements with id '%s'", id, fl.ID)
		}
		flowsByID[fl.ID] = fl
		fl.Source.Outgoing = append(fl.Source.Outgoing, fl)
		fl.Target.Incoming = append(fl.Target.Incoming, fl)
	}
	return proc, p.link(proc, flowsByID)
}

func (p *parser) flow(proc *Process, n *node) (*Flow, error) {
	fl := &Flow{ID: n.attr("id")}
	if fl.ID == "" {
		return nil, p.fail("a sequence flow in process '%s' has no id", proc.ID)
	}
	fl.Source, fl.Target = proc.Elements[n.attr("sourceRef")], proc.Elements[n.attr("targetRef")]
	if fl.Source == nil || fl.Target == nil {
		return nil, p.fail("sequence flow '%s' connects unknown elements '%s' -> '%s'", fl.ID, n.attr("sourceRef"), n.attr("targetRef"))
	}
	if ce := n.child("conditionExpression"); ce != nil {
		c, err := ParseCondition(ce.text.String())
		if err != nil {
			return nil, p.fail("sequence flow '%s': %v", fl.ID, err)
		}
		fl.Condition = c
	}
	return fl, nil
}

// link checks the graph once every element and flow is known.
func (p *parser) link(proc *Process, flows map[string]*Flow) error {
	ids := make([]string, 0, len(proc.Elements))
	for id := range proc.Elements {
		ids = append(ids, id)
	}
	sort.Strings(ids) // deterministic error messages
	for _, id := range ids {
		el := proc.Elements[id]
		switch el.Kind {
		case StartEvent:
			if len(el.Incoming) > 0 {
				return p.fail("start event '%s' must not have incoming sequence flows", id)
			}
			switch el.Trigger {
			case None:
				if proc.NoneStart != nil {
					return p.fail("process '%s' has more than one none start event ('%s', '%s')", proc.ID, proc.NoneStart.ID, id)
				}
				proc.NoneStart = el
			case Message:
				proc.MessageStarts = append(proc.MessageStarts, el)
			case Signal:
				proc.SignalStarts = append(proc.SignalStarts, el)
			case Conditional:
				proc.ConditionalStarts = append(proc.ConditionalStarts, el)
			}
		case EndEvent:
			if len(el.Outgoing) > 0 {
				return p.fail("end event '%s' must not have outgoing sequence flows", id)
			}
		case ExclusiveGateway:
			if d := el.Default.ID; d != "" {
				f := flows[d]
				if f == nil || f.Source != el {
					return p.fail("default flow '%s' of exclusive gateway '%s' is not one of its outgoing flows", d, id)
				}
				el.Default = f
			} else {
				el.Default = nil
			}
			if len(el.Outgoing) > 1 {
				for _, f := range el.Outgoing {
					if f.Condition == nil && f != el.Default {
						return p.fail("sequence flow '%s' leaving exclusive gateway '%s' needs a condition or must be the default flow", f.ID, id)
					}
				}
			}
		case ErrorBoundaryEvent:
			host := proc.Elements[el.AttachedTo]
			if host == nil || host.Kind != ServiceTask {
				return p.fail("boundary event '%s' must be attached to a service task, not '%s'", id, el.AttachedTo)
			}
			host.Boundaries = append(host.Boundaries, el)
			if len(el.Incoming) > 0 {
				return p.fail("boundary event '%s' must not have incoming sequence flows", id)
			}
		}
		if el.Kind != EndEvent && len(el.Outgoing) == 0 {
			return p.fail("element '%s' has no outgoing sequence flow", id)
		}
		if el.Kind != StartEvent && el.Kind != ErrorBoundaryEvent && len(el.Incoming) == 0 {
			return p.fail("element '%s' has no incoming sequence flow", id)
		}
	}
	if proc.NoneStart == nil && len(proc.MessageStarts) == 0 && len(proc.SignalStarts) == 0 && len(proc.ConditionalStarts) == 0 {
		return p.fail("process '%s' must have at least one start event", proc.ID)
	}
	return nil
}

func eventDefinitions(n *node) []*node {
	var defs []*node
	for _, c := range n.children {
		if strings.HasSuffix(c.name, "EventDefinition") {
			defs = append(defs, c)
		}
	}
	return defs
}

func (p *parser) startEvent(n *node) (*Element, error) {
	el := &Element{Kind: StartEvent}
	defs := eventDefinitions(n)
	if len(defs) > 1 {
		return nil, p.fail("start event '%s' has more than one event definition", n.attr("id"))
	}
	if len(defs) == 0 {
		return el, nil
	}
	switch d := defs[0]; d.name {
	case "messageEventDefinition":
		name, ok := p.messages[d.attr("messageRef")]
		if !ok || name == "" {
			return nil, p.fail("message start event '%s' must reference a message with a name", n.attr("id"))
		}
		el.Trigger, el.MessageName = Message, literal(name)
	case "signalEventDefinition":
		name, ok := p.signals[d.attr("signalRef")]
		if !ok || name == "" {
			return nil, p.fail("signal start event '%s' must reference a signal with a name", n.attr("id"))
		}
		el.Trigger, el.SignalName = Signal, literal(name)
	case "conditionalEventDefinition":
		cond := d.child("condition")
		if cond == nil {
			return nil, p.fail("conditional start event '%s' must have a condition", n.attr("id"))
		}
		c, err := ParseCondition(cond.text.String())
		if err != nil {
			return nil, p.fail("conditional start event '%s': %v", n.attr("id"), err)
		}
		el.Trigger, el.Condition = Conditional, c
	default:
		return nil, p.fail("start event '%s' with <%s> is not supported by the simulator", n.attr("id"), d.name)
	}
	return el, nil
}

func (p *parser) endEvent(n *node) (*Element, error) {
	if defs := eventDefinitions(n); len(defs) > 0 {
		return nil, p.fail("end event '%s' with <%s> is not supported by the simulator", n.attr("id"), defs[0].name)
	}
	return &Element{Kind: EndEvent}, nil
}

func (p *parser) serviceTask(n *node) (*Element, error) {
	el := &Element{Kind: ServiceTask, Retries: 3}
	var td *node
	if ext := n.child("extensionElements"); ext != nil {
		td = ext.child("taskDefinition")
	}
	if td == nil {
		return nil, p.fail("service task '%s' must have a zeebe:taskDefinition", n.attr("id"))
	}
	el.JobType = literal(td.attr("type"))
	if strings.TrimSpace(el.JobType) == "" {
		return nil, p.fail("service task '%s': zeebe:taskDefinition must have a type", n.attr("id"))
	}
	if r := literal(td.attr("retries")); r != "" {
		v, err := strconv.ParseInt(r, 10, 32)
		if err != nil || v < 0 {
			return nil, p.fail("service task '%s': retries %q must be a non-negative number", n.attr("id"), r)
		}
		el.Retries = int32(v)
	}
	return el, nil
}

func (p *parser) catchEvent(n *node) (*Element, error) {
	defs := eventDefinitions(n)
	if len(defs) == 1 {
		switch defs[0].name {
		case "signalEventDefinition":
			name := literal(p.signals[defs[0].attr("signalRef")])
			if name == "" {
				return nil, p.fail("signal catch event '%s' must reference a signal with a name", n.attr("id"))
			}
			return &Element{Kind: SignalCatchEvent, SignalName: name}, nil
		case "timerEventDefinition":
			return p.timerCatchEvent(n.attr("id"), defs[0])
		}
	}
	if len(defs) != 1 || defs[0].name != "messageEventDefinition" {
		what := "no event definition"
		if len(defs) > 0 {
			what = "<" + defs[0].name + ">"
		}
		return nil, p.fail("intermediate catch event '%s' with %s is not supported by the simulator", n.attr("id"), what)
	}
	id := n.attr("id")
	msgID := defs[0].attr("messageRef")
	name := literal(p.messages[msgID])
	if name == "" {
		return nil, p.fail("message catch event '%s' must reference a message with a name", id)
	}
	el := &Element{Kind: MessageCatchEvent, MessageName: name}
	key, err := p.correlationKey(msgID)
	if err != nil {
		return nil, p.fail("message catch event '%s': %v", id, err)
	}
	el.CorrelationKey = key
	return el, nil
}

// timerCatchEvent reads a timer that waits a fixed duration. A date or a
// cycle, or a duration the simulator would have to evaluate FEEL for, is
// rejected rather than guessed at.
func (p *parser) timerCatchEvent(id string, def *node) (*Element, error) {
	for _, other := range []string{"timeDate", "timeCycle"} {
		if def.child(other) != nil {
			return nil, p.fail("intermediate timer catch event '%s' with <%s> is not supported by the simulator", id, other)
		}
	}
	td := def.child("timeDuration")
	if td == nil {
		return nil, p.fail("intermediate timer catch event '%s' must have a <timeDuration>", id)
	}
	text := strings.TrimSpace(td.text.String())
	value := literal(text)
	if strings.HasPrefix(value, "=") {
		return nil, p.fail("intermediate timer catch event '%s': the expression %q is not supported by the simulator (give an ISO-8601 duration like PT10M)", id, text)
	}
	d, err := parseDuration(value)
	if err != nil {
		return nil, p.fail("intermediate timer catch event '%s': %v", id, err)
	}
	return &Element{Kind: TimerCatchEvent, TimerDuration: d}, nil
}

// correlationKey reads a message's correlation key expression as a
// variable path.
func (p *parser) correlationKey(msgID string) ([]string, error) {
	expr, ok := p.subscriptions[msgID]
	if !ok || expr == "" {
		return nil, fmt.Errorf("message '%s' must have a zeebe:subscription correlationKey", msgID)
	}
	body, ok := strings.CutPrefix(strings.TrimSpace(expr), "=")
	if !ok {
		return nil, fmt.Errorf("correlationKey %q must be an expression ('=variable')", expr)
	}
	return parsePath(strings.TrimSpace(body))
}

func (p *parser) boundaryEvent(n *node) (*Element, error) {
	defs := eventDefinitions(n)
	if len(defs) != 1 || defs[0].name != "errorEventDefinition" {
		return nil, p.fail("boundary event '%s' is supported only as an error boundary event", n.attr("id"))
	}
	el := &Element{Kind: ErrorBoundaryEvent, AttachedTo: n.attr("attachedToRef"), CancelActivity: n.attr("cancelActivity") != "false"}
	if ref := defs[0].attr("errorRef"); ref != "" {
		code, ok := p.errors[ref]
		if !ok {
			return nil, p.fail("error boundary event '%s' references unknown error '%s'", n.attr("id"), ref)
		}
		el.ErrorCode = literal(code)
	}
	if !el.CancelActivity {
		return nil, p.fail("error boundary event '%s' must interrupt (cancelActivity=\"true\")", n.attr("id"))
	}
	return el, nil
}

// literal strips a static FEEL string expression (`="x"`) to its value and
// returns other values unchanged.
func literal(s string) string {
	s = strings.TrimSpace(s)
	if body, ok := strings.CutPrefix(s, "="); ok {
		body = strings.TrimSpace(body)
		if u, err := strconv.Unquote(body); err == nil {
			return u
		}
	}
	return s
}

// MessageStartNames returns the message names of the message start events
// of the executable processes in a BPMN resource. Unlike Parse it accepts
// every BPMN element (the federation proxy reads resources that real Zeebe
// clusters run) and returns nil for anything it cannot read.
func MessageStartNames(data []byte) []string {
	root, err := parseTree(data)
	if err != nil || root.name != "definitions" {
		return nil
	}
	messages := map[string]string{}
	for _, c := range root.children {
		if c.name == "message" {
			messages[c.attr("id")] = literal(c.attr("name"))
		}
	}
	var names []string
	seen := map[string]bool{}
	for _, proc := range root.children {
		if proc.name != "process" || proc.attr("isExecutable") != "true" {
			continue
		}
		for _, el := range proc.children {
			if el.name != "startEvent" {
				continue
			}
			for _, d := range eventDefinitions(el) {
				if d.name != "messageEventDefinition" {
					continue
				}
				if n := messages[d.attr("messageRef")]; n != "" && !seen[n] {
					seen[n] = true
					names = append(names, n)
				}
			}
		}
	}
	return names
}
