package sim

import (
	"maps"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/shardctl/shardctl/internal/bpmn"
	pb "github.com/shardctl/shardctl/internal/gatewaypb"
)

// openSubscription starts waiting for a message: it reads the correlation
// key and asks the partition that owns the key (by Zeebe's hash) to open a
// subscription there.
func (p *partition) openSubscription(ei *elementInstance) {
	key, ok := correlationValue(ei.inst.vars, ei.el.CorrelationKey)
	if !ok {
		p.raiseIncident(incidentExtractValue, ei, nil)
		return
	}
	owner := p.cluster.partitionFor(messagePartition(key, p.cluster.cfg.Partitions))
	ei.subPartition, ei.subName, ei.subKey = owner.id, ei.el.MessageName, key
	sub := &subscription{processID: ei.inst.proc.id, partition: p.id, elementKey: ei.key, instanceKey: ei.inst.key}
	name := ei.el.MessageName
	_ = owner.enqueue(classInternal, func() { owner.addSubscription(msgKey{name, key}, sub) })
}

// closeSubscription withdraws an open subscription (instance cancelled).
func (p *partition) closeSubscription(ei *elementInstance) {
	owner := p.cluster.partitionFor(ei.subPartition)
	k, elementKey := msgKey{ei.subName, ei.subKey}, ei.key
	ei.subName = ""
	_ = owner.enqueue(classInternal, func() {
		subs := owner.state.subscriptions[k]
		for i, s := range subs {
			if s.elementKey == elementKey {
				owner.state.subscriptions[k] = append(subs[:i:i], subs[i+1:]...)
				break
			}
		}
		if len(owner.state.subscriptions[k]) == 0 {
			delete(owner.state.subscriptions, k)
		}
	})
}

// addSubscription runs on the message's partition: a buffered message not
// yet correlated to this process correlates at once, else it waits.
func (p *partition) addSubscription(k msgKey, sub *subscription) {
	t := now()
	for _, m := range p.state.messages[k] {
		if t.Before(m.expires) && !m.processes[sub.processID] {
			m.processes[sub.processID] = true
			p.correlate(sub, m)
			return
		}
	}
	p.state.subscriptions[k] = append(p.state.subscriptions[k], sub)
}

// correlate sends a message to the instance waiting for it.
func (p *partition) correlate(sub *subscription, m *message) {
	target := p.cluster.partitionFor(sub.partition)
	vars := m.vars
	_ = target.enqueue(classInternal, func() {
		ei := target.state.elements[sub.elementKey]
		if ei == nil || ei.subName == "" {
			return // cancelled meanwhile
		}
		ei.subName = ""
		p.mergeVars(ei.inst, vars)
		target.leave(ei)
	})
}

// publish runs on the partition that owns the correlation key.
func (p *partition) publish(name, corrKey, id string, ttl time.Duration, vars map[string]any) (int64, error) {
	t := now()
	if id != "" {
		if m := p.state.messageIDs[msgIDKey{name, corrKey, id}]; m != nil && t.Before(m.expires) {
			return 0, rejection(codes.AlreadyExists, "PUBLISH", "Expected to publish a new message with id '%s', but a message with that id was already published", id)
		}
	}
	m := &message{key: p.keys.next(), name: name, corrKey: corrKey, id: id, vars: vars, expires: t.Add(ttl), processes: map[string]bool{}}
	k := msgKey{name, corrKey}

	// A message correlates once per process (bpmnProcessId): to the
	// oldest waiting subscription of each.
	subs := p.state.subscriptions[k]
	kept := subs[:0]
	for _, s := range subs {
		if m.processes[s.processID] {
			kept = append(kept, s)
			continue
		}
		m.processes[s.processID] = true
		p.correlate(s, m)
	}
	clear(subs[len(kept):])
	if len(kept) == 0 {
		delete(p.state.subscriptions, k)
	} else {
		p.state.subscriptions[k] = kept
	}

	for _, proc := range p.cluster.repo.latestAll() {
		if !m.processes[proc.id] {
			p.startByMessage(proc, m)
		}
	}

	if ttl > 0 {
		m.buffered = true
		p.state.messages[k] = append(p.state.messages[k], m)
		p.state.buffered++
		p.m.buffered.Set(float64(p.state.buffered))
		if id != "" {
			p.state.messageIDs[msgIDKey{name, corrKey, id}] = m
		}
	}
	return m.key, nil
}

// startByMessage creates an instance at a message start event of proc,
// unless an instance that the same correlation key started is active.
func (p *partition) startByMessage(proc *process, m *message) bool {
	var start *bpmn.Element
	for _, s := range proc.model.MessageStarts {
		if s.MessageName == m.name {
			start = s
			break
		}
	}
	if start == nil {
		return false
	}
	sk := startKey{proc.id, m.corrKey}
	if m.corrKey != "" {
		if _, active := p.state.messageStarted[sk]; active {
			return false
		}
	}
	m.processes[proc.id] = true
	inst := p.createInstance(proc, copyVars(m.vars), []*bpmn.Element{start}, nil, instanceLabels{})
	if m.corrKey != "" && !inst.ended {
		inst.startedBy = &sk
		p.state.messageStarted[sk] = inst.key
	}
	return true
}

// startBufferedMessage: when an instance a correlation key started ends,
// a message buffered meanwhile for the same key starts the next one.
func (p *partition) startBufferedMessage(ended *process, corrKey string) {
	processID := ended.id
	proc := p.cluster.repo.latest(ended.physicalTenant, processID)
	if proc == nil {
		return
	}
	t := now()
	for _, start := range proc.model.MessageStarts {
		for _, m := range p.state.messages[msgKey{start.MessageName, corrKey}] {
			if t.Before(m.expires) && !m.processes[processID] {
				p.startByMessage(proc, m)
				return
			}
		}
	}
}

func (p *partition) expireMessages(t time.Time) {
	for k, ms := range p.state.messages {
		kept := ms[:0]
		for _, m := range ms {
			if t.Before(m.expires) {
				kept = append(kept, m)
				continue
			}
			if m.id != "" {
				delete(p.state.messageIDs, msgIDKey{m.name, m.corrKey, m.id})
			}
			p.state.buffered--
		}
		p.m.buffered.Set(float64(p.state.buffered))
		clear(ms[len(kept):])
		if len(kept) == 0 {
			delete(p.state.messages, k)
		} else {
			p.state.messages[k] = kept
		}
	}
}

// broadcastSignal runs on partition 1: signal start events create one
// instance per cluster there; every partition triggers its waiting catch
// events.
func (p *partition) broadcastSignal(name string, vars map[string]any) int64 {
	key := p.keys.next()
	for _, proc := range p.cluster.repo.latestAll() {
		for _, s := range proc.model.SignalStarts {
			if s.SignalName == name {
				p.createInstance(proc, copyVars(vars), []*bpmn.Element{s}, nil, instanceLabels{})
				break
			}
		}
	}
	p.triggerSignal(name, vars)
	for _, other := range p.cluster.partitions {
		if other != p {
			o := other
			_ = o.enqueue(classInternal, func() { o.triggerSignal(name, vars) })
		}
	}
	return key
}

func (p *partition) triggerSignal(name string, vars map[string]any) {
	waits := p.state.signalWaits[name]
	delete(p.state.signalWaits, name)
	for _, ei := range waits {
		if p.state.elements[ei.key] == nil {
			continue
		}
		p.mergeVars(ei.inst, vars)
		p.leave(ei)
	}
}

func copyVars(vars map[string]any) map[string]any {
	out := make(map[string]any, len(vars))
	maps.Copy(out, vars)
	return out
}

// evaluateConditionals starts an instance at each conditional start
// event whose condition holds for vars: two of one process that both hold
// start two instances, as Camunda's do.
func (p *partition) evaluateConditionals(procs []*process, vars map[string]any) []*pb.ProcessInstanceReference {
	var out []*pb.ProcessInstanceReference
	for _, proc := range procs {
		for _, s := range proc.model.ConditionalStarts {
			if s.Condition.Eval(vars) {
				inst := p.createInstance(proc, copyVars(vars), []*bpmn.Element{s}, nil, instanceLabels{})
				out = append(out, &pb.ProcessInstanceReference{ProcessDefinitionKey: proc.key, ProcessInstanceKey: inst.key})
			}
		}
	}
	return out
}
