package sim

import (
	"time"

	"google.golang.org/grpc/codes"

	"github.com/shardctl/shardctl/internal/bpmn"
)

func (p *partition) raiseIncident(kind incidentKind, ei *elementInstance, j *job) {
	inc := &incident{key: p.keys.next(), kind: kind, elem: ei, job: j, created: now()}
	p.state.incidents[inc.key] = inc
	ei.incident = inc
	ei.inst.incidents++
	p.exportIncident(inc, false)
	p.exportElement(ei, "ACTIVE")
	p.exportInstance(ei.inst, "ACTIVE", time.Time{})
	p.m.incident("created")
	p.m.pendingIncidents.Set(float64(len(p.state.incidents)))
}

func (p *partition) deleteIncident(inc *incident) {
	delete(p.state.incidents, inc.key)
	if inc.elem.incident == inc {
		inc.elem.incident = nil
	}
	inc.elem.inst.incidents--
	p.exportIncident(inc, true)
	if !inc.elem.inst.ended {
		p.exportInstance(inc.elem.inst, "ACTIVE", time.Time{})
	}
	if _, waiting := p.state.elements[inc.elem.key]; waiting {
		p.exportElement(inc.elem, "ACTIVE")
	}
	p.m.incident("resolved")
	p.m.pendingIncidents.Set(float64(len(p.state.incidents)))
}

// resolveIncident retries what raised the incident, as Zeebe does: a job
// with retries becomes activatable again (with none left, a new incident
// is raised at once), a gateway re-evaluates its conditions, a catch event
// reads its correlation key again.
func (p *partition) resolveIncident(key int64) error {
	inc := p.state.incidents[key]
	if inc == nil {
		return rejection(codes.NotFound, "RESOLVE", "Expected to resolve incident with key '%d', but no such incident was found", key)
	}
	p.deleteIncident(inc)
	ei := inc.elem
	switch inc.kind {
	case incidentJobNoRetries:
		if inc.job.retries <= 0 {
			p.raiseIncident(incidentJobNoRetries, ei, inc.job)
			return nil
		}
		p.makeActivatable(inc.job)
	case incidentUnhandledError:
		p.makeActivatable(inc.job)
	case incidentCondition:
		p.unwait(ei)
		p.reenter(ei)
		if _, waiting := p.state.elements[ei.key]; !waiting {
			p.exportElement(ei, "COMPLETED")
		}
	case incidentExtractValue:
		p.openSubscription(ei)
	}
	return nil
}

// reenter runs an element's behaviour again on its existing token.
func (p *partition) reenter(ei *elementInstance) {
	switch ei.el.Kind {
	case bpmn.ExclusiveGateway:
		p.drive(p.chooseFlow(ei, nil))
		p.completeIfDone(ei.inst)
	}
}
