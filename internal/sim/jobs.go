package sim

import (
	"time"

	"google.golang.org/grpc/codes"

	"github.com/shardctl/shardctl/internal/bpmn"
	pb "github.com/shardctl/shardctl/internal/gatewaypb"
)

const defaultTenant = "<default>"

func (p *partition) createJob(ei *elementInstance) {
	j := &job{key: p.keys.next(), typ: ei.el.JobType, retries: ei.el.Retries, elem: ei, created: now()}
	if j.retries <= 0 {
		j.retries = 3
	}
	p.exportJob(j, jobCreatedState, false)
	ei.job = j
	p.state.jobs[j.key] = j
	p.m.job(jobCreated, j.typ)
	p.makeActivatable(j)
}

// makeActivatable offers a job to a job stream first (Zeebe's job push),
// then queues it for polling workers and wakes long-polling ones.
func (p *partition) makeActivatable(j *job) {
	j.state = jobStateActivatable
	j.worker, j.deadline = "", time.Time{}
	delete(p.state.activated, j.key)
	delete(p.state.backoff, j.key)
	if p.cluster.streams.push(p, j) {
		return
	}
	j.seq++
	p.state.activatable[j.typ] = append(p.state.activatable[j.typ], jobRef{job: j, seq: j.seq})
	if p.cluster.pollers.notify(j.typ) {
		p.m.job(jobNotified, j.typ)
	}
}

// activate hands one job to a worker.
func (p *partition) activate(j *job, worker string, timeout time.Duration, fetch []string) *pb.ActivatedJob {
	deadline := now().Add(timeout)
	aj := p.activatedJob(j, worker, deadline, fetch)
	p.markActivated(j, worker, deadline)
	return aj
}

func (p *partition) markActivated(j *job, worker string, deadline time.Time) {
	j.state = jobStateActivated
	j.worker = worker
	j.deadline = deadline
	j.seq++ // any queue entry is stale now
	p.state.activated[j.key] = j
	p.exportJob(j, jobCreatedState, false)
	p.m.job(jobActivated, j.typ)
}

// activatedJob is the job as a worker receives it.
func (p *partition) activatedJob(j *job, worker string, deadline time.Time, fetch []string) *pb.ActivatedJob {
	ei := j.elem
	proc := ei.inst.proc
	return &pb.ActivatedJob{
		Key:                      j.key,
		Type:                     j.typ,
		ProcessInstanceKey:       ei.inst.key,
		BpmnProcessId:            proc.id,
		ProcessDefinitionVersion: proc.version,
		ProcessDefinitionKey:     proc.key,
		ElementId:                ei.el.ID,
		ElementInstanceKey:       ei.key,
		CustomHeaders:            "{}",
		Worker:                   worker,
		Retries:                  j.retries,
		Deadline:                 deadline.UnixMilli(),
		Variables:                encodeVariables(filterVariables(ei.inst.vars, fetch)),
		TenantId:                 defaultTenant,
		Tags:                     ei.inst.labels.tags, // never changed after creation
	}
}

// activateJobs activates up to max queued jobs of a type, oldest first.
func (p *partition) activateJobs(typ string, max int, worker string, timeout time.Duration, fetch []string) []*pb.ActivatedJob {
	queue := p.state.activatable[typ]
	var out []*pb.ActivatedJob
	i := 0
	for ; i < len(queue) && len(out) < max; i++ {
		ref := queue[i]
		if ref.seq != ref.job.seq || ref.job.state != jobStateActivatable || p.state.jobs[ref.job.key] == nil {
			continue
		}
		out = append(out, p.activate(ref.job, worker, timeout, fetch))
	}
	if i == len(queue) {
		delete(p.state.activatable, typ)
	} else {
		clear(queue[:i])
		p.state.activatable[typ] = queue[i:]
	}
	return out
}

func (p *partition) removeJob(j *job) {
	delete(p.state.jobs, j.key)
	delete(p.state.activated, j.key)
	delete(p.state.backoff, j.key)
	j.seq++
	j.elem.job = nil
}

func (p *partition) lookupJob(key int64, intent, verb string) (*job, error) {
	j := p.state.jobs[key]
	if j == nil {
		return nil, rejection(codes.NotFound, intent, "Expected to %s job with key '%d', but no such job was found", verb, key)
	}
	return j, nil
}

// openJob finds a job that may be completed, failed or thrown: Zeebe
// checks the job's state, not which worker holds it.
func (p *partition) openJob(key int64, intent, verb string) (*job, error) {
	j, err := p.lookupJob(key, intent, verb)
	if err != nil {
		return nil, err
	}
	if j.state != jobStateActivatable && j.state != jobStateActivated {
		return nil, rejection(codes.FailedPrecondition, intent, "Expected to %s job with key '%d', but it is in state '%s'", verb, key, j.state)
	}
	return j, nil
}

func (p *partition) completeJob(key int64, vars map[string]any) error {
	j, err := p.openJob(key, "COMPLETE", "complete")
	if err != nil {
		return err
	}
	ei := j.elem
	p.mergeVars(ei.inst, vars)
	p.removeJob(j)
	p.exportJob(j, jobCompletedState, true)
	p.m.job(jobCompleted, j.typ)
	p.leave(ei)
	return nil
}

func (p *partition) failJob(key int64, retries int32, msg string, backoff time.Duration, vars map[string]any) error {
	j, err := p.openJob(key, "FAIL", "fail")
	if err != nil {
		return err
	}
	p.mergeVars(j.elem.inst, vars)
	j.retries, j.errorMessage = retries, msg
	delete(p.state.activated, j.key)
	p.m.job(jobFailed, j.typ)
	switch {
	case retries <= 0:
		j.state = jobStateIncident
		j.seq++
		p.raiseIncident(incidentJobNoRetries, j.elem, j)
	case backoff > 0:
		j.state = jobStateFailed
		j.seq++
		j.backoffUntil = now().Add(backoff)
		p.state.backoff[j.key] = j
	default:
		p.makeActivatable(j)
	}
	p.exportJob(j, jobFailedState, false)
	return nil
}

func (p *partition) throwError(key int64, code, msg string, vars map[string]any) error {
	j, err := p.openJob(key, "THROW_ERROR", "throw an error for")
	if err != nil {
		return err
	}
	ei := j.elem
	p.mergeVars(ei.inst, vars)
	p.m.job(jobErrored, j.typ)
	catcher := catchingBoundary(ei.el, code)
	if catcher == nil {
		j.state, j.errorMessage = jobStateErrorThrown, msg
		j.seq++
		delete(p.state.activated, j.key)
		p.exportJob(j, jobErrorState, false)
		p.raiseIncident(incidentUnhandledError, ei, j)
		return nil
	}
	p.removeJob(j) // thrown, not canceled
	p.exportJob(j, jobErrorState, true)
	p.terminateElement(ei)
	ei.inst.tokens++
	p.drive([]step{{inst: ei.inst, el: catcher}})
	p.completeIfDone(ei.inst)
	return nil
}

// catchingBoundary finds the error boundary event that catches code: one
// for exactly that code first, else a catch-all one.
func catchingBoundary(task *bpmn.Element, code string) *bpmn.Element {
	var catchAll *bpmn.Element
	for _, b := range task.Boundaries {
		switch b.ErrorCode {
		case code:
			return b
		case "":
			catchAll = b
		}
	}
	return catchAll
}

func (p *partition) updateRetries(key int64, retries int32) error {
	j, err := p.lookupJob(key, "UPDATE_RETRIES", "update retries of")
	if err != nil {
		return err
	}
	j.retries = retries
	p.exportJob(j, jobRetriesState, false)
	return nil
}

func (p *partition) updateTimeout(key int64, timeout time.Duration) error {
	j, err := p.lookupJob(key, "UPDATE_TIMEOUT", "update the deadline of")
	if err != nil {
		return err
	}
	if j.state != jobStateActivated {
		return rejection(codes.FailedPrecondition, "UPDATE_TIMEOUT", "Expected to update the deadline of job with key '%d', but it is in state '%s'", key, j.state)
	}
	j.deadline = now().Add(timeout)
	p.exportJob(j, j.searchState, false)
	return nil
}

// giveBack returns a job the gateway could not deliver: retries unchanged,
// no backoff, activatable at once (Zeebe's gateway does this with a
// FailJob command, and counts it as failed).
func (p *partition) giveBack(key int64) {
	j := p.state.jobs[key]
	if j == nil || j.state != jobStateActivated {
		return
	}
	p.m.job(jobFailed, j.typ)
	p.makeActivatable(j)
	p.exportJob(j, jobFailedState, false)
}

// expiryDue reports whether a job deadline, a retry backoff or a
// message's time to live has passed: whether expireDue has work.
func (p *partition) expiryDue(t time.Time) bool {
	for _, j := range p.state.activated {
		if t.After(j.deadline) {
			return true
		}
	}
	for _, j := range p.state.backoff {
		if !t.Before(j.backoffUntil) {
			return true
		}
	}
	for _, ms := range p.state.messages {
		for _, m := range ms {
			if !t.Before(m.expires) {
				return true
			}
		}
	}
	return false
}

// expireDue is the record Zeebe's job and message checkers write: job
// deadlines, retry backoffs and message time-to-live.
func (p *partition) expireDue() {
	p.state.expiryQueued = false
	t := now()
	for _, j := range p.state.activated {
		if t.After(j.deadline) {
			p.m.job(jobTimedOut, j.typ)
			p.makeActivatable(j)
			p.exportJob(j, jobTimedOutState, false)
		}
	}
	for _, j := range p.state.backoff {
		if !t.Before(j.backoffUntil) {
			p.makeActivatable(j)
		}
	}
	p.expireMessages(t)
}
