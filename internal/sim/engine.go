package sim

import (
	"errors"
	"fmt"
	"maps"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shardctl/shardctl/internal/bpmn"
)

var errNotObject = errors.New("expected a JSON object")

// rejection builds the gRPC error the Zeebe gateway returns for a
// rejected command: "Command 'X' rejected with code 'Y': reason".
func rejection(code codes.Code, intent, reason string, a ...any) error {
	zcode := map[codes.Code]string{
		codes.NotFound:           "NOT_FOUND",
		codes.FailedPrecondition: "INVALID_STATE",
		codes.InvalidArgument:    "INVALID_ARGUMENT",
		codes.AlreadyExists:      "ALREADY_EXISTS",
	}[code]
	return status.Errorf(code, "Command '%s' rejected with code '%s': %s", intent, zcode, fmt.Sprintf(reason, a...))
}

// step is a token arriving at an element, through a flow (nil for a start).
type step struct {
	inst *instance
	el   *bpmn.Element
	via  *bpmn.Flow
}

// stepBudget bounds the elements one record may pass through; a loop of
// gateways with no wait state continues in follow-up records instead of
// holding the partition forever.
const stepBudget = 1000

// drive moves tokens until each waits (task, catch event) or ends.
func (p *partition) drive(steps []step) {
	var followUps int64
	for n := 0; len(steps) > 0; n++ {
		if n == stepBudget {
			rest := steps
			_ = p.enqueue(classInternal, func() { p.drive(rest) })
			break
		}
		s := steps[0]
		steps = steps[1:]
		s.inst.tokens--
		if s.inst.ended {
			continue
		}
		steps = p.enter(s, steps)
		followUps++
	}
	if followUps > 0 {
		p.appendFollowUps(followUps)
	}
}

func (p *partition) push(steps []step, inst *instance, flows ...*bpmn.Flow) []step {
	for _, f := range flows {
		inst.tokens++
		steps = append(steps, step{inst: inst, el: f.Target, via: f})
	}
	return steps
}

func (p *partition) newElement(inst *instance, el *bpmn.Element) *elementInstance {
	ei := &elementInstance{key: p.keys.next(), el: el, inst: inst, started: now()}
	p.m.element("activated", el.Kind.BpmnElementType())
	return ei
}

// wait keeps an element instance active until something completes it.
func (p *partition) wait(ei *elementInstance) {
	ei.inst.active[ei.key] = ei
	p.state.elements[ei.key] = ei
	p.exportElement(ei, "ACTIVE")
}

func (p *partition) unwait(ei *elementInstance) {
	delete(ei.inst.active, ei.key)
	delete(p.state.elements, ei.key)
}

// enter runs one element's behaviour and returns the steps that follow.
func (p *partition) enter(s step, steps []step) []step {
	inst, el := s.inst, s.el
	if el.Kind == bpmn.ParallelGateway && len(el.Incoming) > 1 {
		if !p.joined(inst, el, s.via) {
			return steps
		}
	}
	ei := p.newElement(inst, el)
	switch el.Kind {
	case bpmn.StartEvent, bpmn.ParallelGateway, bpmn.ErrorBoundaryEvent:
		p.m.element("completed", el.Kind.BpmnElementType())
		return p.push(steps, inst, el.Outgoing...)
	case bpmn.EndEvent:
		p.m.element("completed", el.Kind.BpmnElementType())
		p.completeIfDone(inst)
		return steps
	case bpmn.ServiceTask:
		p.wait(ei)
		p.createJob(ei)
		return steps
	case bpmn.ExclusiveGateway:
		return p.chooseFlow(ei, steps)
	case bpmn.MessageCatchEvent:
		p.wait(ei)
		p.openSubscription(ei)
		return steps
	case bpmn.SignalCatchEvent:
		p.wait(ei)
		waits := p.state.signalWaits[el.SignalName]
		if waits == nil {
			waits = map[int64]*elementInstance{}
			p.state.signalWaits[el.SignalName] = waits
		}
		waits[ei.key] = ei
		return steps
	case bpmn.TimerCatchEvent:
		p.wait(ei)
		p.scheduleTimer(ei)
		return steps
	}
	return steps
}

// joined counts a token arriving at a parallel join and reports whether
// every incoming flow now has one, consuming them.
func (p *partition) joined(inst *instance, el *bpmn.Element, via *bpmn.Flow) bool {
	if inst.joins == nil {
		inst.joins = map[string]map[string]int{}
	}
	arrived := inst.joins[el.ID]
	if arrived == nil {
		arrived = map[string]int{}
		inst.joins[el.ID] = arrived
	}
	if via != nil {
		arrived[via.ID]++
		inst.joinWaiting++
	}
	for _, f := range el.Incoming {
		if arrived[f.ID] == 0 {
			return false
		}
	}
	for _, f := range el.Incoming {
		arrived[f.ID]--
		inst.joinWaiting--
	}
	return true
}

func (p *partition) chooseFlow(ei *elementInstance, steps []step) []step {
	el := ei.el
	var taken *bpmn.Flow
	for _, f := range el.Outgoing {
		if f.Condition != nil && f.Condition.Eval(ei.inst.vars) {
			taken = f
			break
		}
	}
	if taken == nil {
		taken = el.Default
	}
	if taken == nil && len(el.Outgoing) == 1 && el.Outgoing[0].Condition == nil {
		taken = el.Outgoing[0]
	}
	if taken == nil {
		p.wait(ei)
		p.raiseIncident(incidentCondition, ei, nil)
		return steps
	}
	p.m.element("completed", el.Kind.BpmnElementType())
	return p.push(steps, ei.inst, taken)
}

// leave completes a waiting element and moves its token on.
func (p *partition) leave(ei *elementInstance) {
	p.unwait(ei)
	p.exportElement(ei, "COMPLETED")
	p.m.element("completed", ei.el.Kind.BpmnElementType())
	p.drive(p.push(nil, ei.inst, ei.el.Outgoing...))
	p.completeIfDone(ei.inst)
}

func (p *partition) completeIfDone(inst *instance) {
	if inst.ended || inst.tokens > 0 || len(inst.active) > 0 || inst.joinWaiting > 0 {
		return
	}
	inst.ended = true
	p.exportInstance(inst, "COMPLETED", now())
	p.m.element("completed", "PROCESS")
	p.endInstance(inst, instanceResult{vars: inst.vars})
}

func (p *partition) endInstance(inst *instance, res instanceResult) {
	delete(p.state.instances, inst.key)
	for _, w := range inst.waiters {
		w <- res
	}
	inst.waiters = nil
	if inst.startedBy != nil {
		delete(p.state.messageStarted, *inst.startedBy)
		p.startBufferedMessage(inst.proc, inst.startedBy.correlationKey)
	}
}

// createInstance activates a new process instance at its start: the none
// start event, a given start element, or a message/signal start event.
func (p *partition) createInstance(proc *process, vars map[string]any, starts []*bpmn.Element, waiter chan<- instanceResult, labels instanceLabels) *instance {
	inst := &instance{key: p.keys.next(), proc: proc, vars: vars, active: map[int64]*elementInstance{}, started: now(), labels: labels}
	if waiter != nil {
		inst.waiters = append(inst.waiters, waiter)
	}
	if inst.vars == nil {
		inst.vars = map[string]any{}
	}
	p.state.instances[inst.key] = inst
	p.exportInstance(inst, "ACTIVE", time.Time{})
	p.exportVariables(inst, inst.vars)
	p.m.element("activated", "PROCESS")
	steps := make([]step, 0, len(starts))
	for _, el := range starts {
		inst.tokens++
		steps = append(steps, step{inst: inst, el: el})
	}
	if p.cluster.cfg.Degrade {
		// The instance is created now; what follows is work behind it,
		// which is where a saturated engine falls behind.
		_ = p.enqueue(classInternal, func() { p.drive(steps); p.completeIfDone(inst) })
	} else {
		p.drive(steps)
		p.completeIfDone(inst)
	}
	return inst
}

// terminate ends an instance early: its waiting elements, jobs,
// subscriptions and incidents go with it.
func (p *partition) terminate(inst *instance) {
	for _, ei := range inst.active {
		p.terminateElement(ei)
	}
	inst.ended = true
	inst.joins, inst.joinWaiting = nil, 0
	p.exportInstance(inst, "TERMINATED", now())
	p.m.element("terminated", "PROCESS")
	p.endInstance(inst, instanceResult{err: status.Errorf(codes.NotFound, "Expected to receive the result of process instance '%d', but it was terminated", inst.key)})
}

func (p *partition) terminateElement(ei *elementInstance) {
	p.unwait(ei)
	defer p.exportElement(ei, "TERMINATED") // after its incident is gone
	if j := ei.job; j != nil {
		p.removeJob(j)
		p.exportJob(j, jobCanceledState, true)
		p.m.job(jobCanceled, j.typ)
	}
	if ei.subName != "" {
		p.closeSubscription(ei)
	}
	if ei.el.Kind == bpmn.SignalCatchEvent {
		delete(p.state.signalWaits[ei.el.SignalName], ei.key)
	}
	if ei.timer != nil {
		p.cancelTimer(ei)
	}
	if ei.incident != nil {
		p.deleteIncident(ei.incident)
	}
	p.m.element("terminated", ei.el.Kind.BpmnElementType())
}

func (p *partition) mergeVars(inst *instance, vars map[string]any) {
	maps.Copy(inst.vars, vars)
	p.exportVariables(inst, vars)
}

// correlationValue reads a catch event's correlation key from the
// instance's variables: strings as they are, numbers as their decimal.
func correlationValue(vars map[string]any, path []string) (string, bool) {
	var cur any = vars
	for _, name := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return "", false
		}
		cur, ok = m[name]
		if !ok {
			return "", false
		}
	}
	switch v := cur.(type) {
	case string:
		return v, true
	case float64:
		if v == float64(int64(v)) {
			return strconv.FormatInt(int64(v), 10), true
		}
		return strconv.FormatFloat(v, 'f', -1, 64), true
	}
	return "", false
}

// now is the clock for deadlines; one place to read it.
func now() time.Time { return time.Now() }
