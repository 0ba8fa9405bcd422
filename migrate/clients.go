package migrate

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/shardctl/shardctl/migrate/kube"
)

// The clients step (--mode k8s) moves what clients reach once green is
// ready and before any weight moves: the proxy places every new instance
// on blue until the first weight step, so clients that now reach it see
// no change. It switches the Service's selector, rewrites the endpoint in
// a ConfigMap or Secret, restarts the workloads that read it and waits for
// their rollouts. Everything is checked before anything is written; each
// change records what it replaced on the object, and the restarts are
// recorded on the cutover's Lease before they are made, so that a resumed
// apply neither repeats nor misses one, and a rollback undoes them.

// DefaultRolloutPoll is how often a rollout is read while waiting for it.
const DefaultRolloutPoll = time.Second

// kubeLock takes the Kubernetes Lease of a plan with a clients step (nil
// without one), from any holder with force. It returns the holder it
// took the Lease from.
func (r *Runner) kubeLock(ctx context.Context, plan Plan, force bool) (*kube.Lock, string, error) {
	if plan.Kube == nil {
		return nil, "", nil
	}
	if err := r.reachable(plan); err != nil {
		return nil, "", err
	}
	ttl := r.LeaseTTL
	if ttl <= 0 {
		ttl = DefaultLeaseTTL
	}
	lock := r.Kube.Lock(plan.Kube.Namespace, plan.Name, r.holder(), ttl)
	from, err := lock.Acquire(ctx, force)
	var held *kube.HeldError
	if errors.As(err, &held) {
		return nil, "", fmt.Errorf("%w: %v", ErrRefused, err)
	}
	if err != nil {
		return nil, "", err
	}
	return lock, from, nil
}

// reachable says why the cluster of plan's clients step cannot be
// reached, if it cannot.
func (r *Runner) reachable(plan Plan) error {
	if r.Kube == nil {
		return fmt.Errorf("cutover %s changes Kubernetes objects in namespace %s, and no cluster can be reached: %v", plan.Name, plan.Kube.Namespace, r.KubeErr)
	}
	return nil
}

func (r *Runner) releaseKube(ctx context.Context, lock *kube.Lock) {
	release, done := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer done()
	_ = lock.Release(release)
}

func (r *Runner) rolloutPoll() time.Duration {
	if r.RolloutPoll > 0 {
		return r.RolloutPoll
	}
	return DefaultRolloutPoll
}

// ClientChanges are the writes the clients step of plan makes (restore:
// the ones a rollback makes), as dry says: computed from the objects as
// they are (client), or answered by the API server without being stored
// (server). A refusal (no ready pod to switch to, a change someone else
// made) is an error wrapping kube.ErrRefused.
func (r *Runner) ClientChanges(ctx context.Context, plan Plan, dry kube.DryRun, restore bool) ([]kube.Change, error) {
	if plan.Kube == nil {
		return nil, nil
	}
	if err := r.reachable(plan); err != nil {
		return nil, err
	}
	spec, kc := *plan.Kube, r.Kube
	var out []kube.Change
	if err := r.endpoints(ctx, plan, dry, restore, nil, func(ch kube.Change) error {
		out = append(out, ch)
		return nil
	}); err != nil {
		return out, err
	}
	ws, err := kc.Resolve(spec.Restart)
	if err != nil {
		return out, fmt.Errorf("%w: %v", ErrBadInput, err)
	}
	if restore {
		st, _, err := kc.ReadLease(ctx, spec.Namespace, plan.Name)
		if err != nil {
			return out, err
		}
		ws = restartedBy(st.Record, ws)
	}
	for _, w := range ws {
		patch, at, err := kc.RestartPatch(ctx, spec.Namespace, w)
		if err != nil {
			return out, err
		}
		ch, err := kc.Restart(ctx, spec.Namespace, w, patch, at, dry)
		if err != nil {
			return out, err
		}
		out = append(out, ch)
	}
	return out, nil
}

// endpoints makes the Service and endpoint changes of plan's clients step
// (restore: undoes them) as dry says, and hands each to made; before runs
// ahead of each.
func (r *Runner) endpoints(ctx context.Context, plan Plan, dry kube.DryRun, restore bool, before func(context.Context) error, made func(kube.Change) error) error {
	spec, kc := *plan.Kube, r.Kube
	var steps []func() (kube.Change, error)
	if spec.Service != "" {
		steps = append(steps, func() (kube.Change, error) {
			if restore {
				return kc.RestoreService(ctx, spec.Namespace, spec.Service, spec.Selector, dry)
			}
			return kc.SwitchService(ctx, spec.Namespace, spec.Service, spec.Selector, dry)
		})
	}
	if kind, name := spec.Config(); name != "" {
		steps = append(steps, func() (kube.Change, error) {
			if restore {
				return kc.RestoreValue(ctx, spec.Namespace, kind, name, spec.Key, spec.Value, dry)
			}
			return kc.RewriteValue(ctx, spec.Namespace, kind, name, spec.Key, spec.Value, dry)
		})
	}
	for _, step := range steps {
		if before != nil {
			if err := before(ctx); err != nil {
				return err
			}
		}
		ch, err := step()
		if err != nil {
			return err
		}
		if err := made(ch); err != nil {
			return err
		}
	}
	return nil
}

// restartedBy are the workloads of ws an apply restarted: the ones a
// rollback restarts again once the endpoint is restored.
func restartedBy(rec kube.Record, ws []kube.Workload) []kube.Workload {
	var out []kube.Workload
	for _, w := range ws {
		if _, ok := rec.Restarts[restartKey(runApply, w)]; ok {
			out = append(out, w)
		}
	}
	return out
}

const (
	runApply    = "apply"
	runRollback = "rollback"
)

func restartKey(run string, w kube.Workload) string { return run + " " + w.String() }

// record starts the Lease's record of this run, when it holds another's.
func (s *session) record(ctx context.Context) error {
	run := ProgressOf(s.rec).Run
	rec, err := s.lock.Record(ctx)
	if err != nil || rec.Run == run {
		return err
	}
	return s.lock.SaveRecord(ctx, func(r *kube.Record) { *r = kube.Record{Run: run} })
}

// done says a change was made, and records it on the Lease when it was
// (not when there was nothing to change).
func (s *session) done(ctx context.Context, ch kube.Change) error {
	s.emit(s.rec.Step, CutoverClients, "", func(e *CutoverEvent) { e.Change = &ch })
	if ch.Patch == nil {
		return nil
	}
	return s.lock.SaveRecord(ctx, func(r *kube.Record) { r.Done = append(r.Done, ch.Line()) })
}

// clients runs the clients step, k of the plan.
func (s *session) clients(ctx context.Context, k int) error {
	spec, kc := *s.plan.Kube, s.r.Kube
	if err := s.record(ctx); err != nil {
		return err
	}
	// Everything is checked before anything is written: the objects, the
	// key, the workloads, a ready pod behind the new selector, and each
	// patch by the API server itself (a server-side dry run: RBAC,
	// validation, admission).
	if _, err := s.r.ClientChanges(ctx, s.plan, kube.DryRunServer, false); err != nil {
		if errors.Is(err, kube.ErrRefused) {
			return s.fail(ctx, k, "clients: "+err.Error())
		}
		return err
	}
	// Before each write, the Lease is checked to be still ours: a
	// rollback that took it meanwhile is not undone behind its back (the
	// restarts check it as they record themselves on it).
	if err := s.r.endpoints(ctx, s.plan, kube.DryRunNone, false, s.lock.Renew, func(ch kube.Change) error { return s.done(ctx, ch) }); err != nil {
		return err
	}
	ws, err := kc.Resolve(spec.Restart)
	if err != nil {
		return err
	}
	return s.restart(ctx, k, runApply, ws)
}

// restart restarts each workload once per run, then waits for every
// rollout within the plan's rollout timeout.
func (s *session) restart(ctx context.Context, k int, run string, ws []kube.Workload) error {
	spec, kc := *s.plan.Kube, s.r.Kube
	rec, err := s.lock.Record(ctx)
	if err != nil {
		return err
	}
	for _, w := range ws {
		key := restartKey(run, w)
		if at, ok := rec.Restarts[key]; ok {
			now, err := kc.RestartedAt(ctx, spec.Namespace, w)
			if err != nil {
				return err
			}
			if now == at {
				s.emit(k, CutoverClients, fmt.Sprintf("%s was restarted at %s: waiting for its rollout", w, at), nil)
				continue
			}
		}
		patch, at, err := kc.RestartPatch(ctx, spec.Namespace, w)
		if err != nil {
			return err
		}
		// Recorded before it is sent: a crash in between leaves a record
		// the next run finds set on the workload, and does not restart it
		// twice.
		if err := s.lock.SaveRecord(ctx, func(r *kube.Record) {
			if r.Restarts == nil {
				r.Restarts = map[string]string{}
			}
			r.Restarts[key] = at
		}); err != nil {
			return err
		}
		ch, err := kc.Restart(ctx, spec.Namespace, w, patch, at, kube.DryRunNone)
		if err != nil {
			return err
		}
		s.emit(k, CutoverClients, "", func(e *CutoverEvent) { e.Change = &ch })
	}
	for _, w := range ws {
		err := kc.WaitRollout(ctx, spec.Namespace, w, time.Duration(spec.RolloutTimeout), s.r.rolloutPoll(), func(msg string) {
			s.emit(k, CutoverClients, fmt.Sprintf("%s: %s", w, msg), nil)
		})
		if err != nil {
			return err
		}
		if err := s.lock.SaveRecord(ctx, func(r *kube.Record) { r.Done = append(r.Done, fmt.Sprintf("%s rolled out (%s)", w, run)) }); err != nil {
			return err
		}
	}
	return nil
}

// restoreClients undoes the clients step (a rollback): the Service's
// selector and the endpoint as they were, and the workloads the apply
// restarted restarted again to read it.
func (s *session) restoreClients(ctx context.Context) error {
	if s.plan.Kube == nil {
		return nil
	}
	k := s.rec.Step
	// Checked before anything is written, as the apply checks.
	if _, err := s.r.ClientChanges(ctx, s.plan, kube.DryRunServer, true); err != nil {
		return fmt.Errorf("restore the clients: %w", err)
	}
	if err := s.r.endpoints(ctx, s.plan, kube.DryRunNone, true, s.lock.Renew, func(ch kube.Change) error { return s.done(ctx, ch) }); err != nil {
		return err
	}
	spec, kc := *s.plan.Kube, s.r.Kube
	ws, err := kc.Resolve(spec.Restart)
	if err != nil {
		return err
	}
	rec, err := s.lock.Record(ctx)
	if err != nil {
		return err
	}
	return s.restart(ctx, k, runRollback, restartedBy(rec, ws))
}

// KubeStatus is where a cutover's Kubernetes step stands.
type KubeStatus struct {
	Namespace string           `json:"namespace"`
	LeaseName string           `json:"leaseName"`
	Lease     *kube.LeaseState `json:"lease,omitempty"`
	// Service is the Service's selector now.
	Service string `json:"service,omitempty"`
	// Rollouts are each workload's rollout status now.
	Rollouts map[string]string `json:"rollouts,omitempty"`
	// Error is why the cluster could not be read.
	Error string `json:"error,omitempty"`
}

// KubeStatusOf reads where plan's Kubernetes step stands (nil without one).
func KubeStatusOf(ctx context.Context, kc *kube.Cluster, plan Plan) (*KubeStatus, error) {
	if plan.Kube == nil || kc == nil {
		return nil, nil
	}
	spec := *plan.Kube
	st := &KubeStatus{Namespace: spec.Namespace, LeaseName: kube.LeaseName(plan.Name)}
	lease, found, err := kc.ReadLease(ctx, spec.Namespace, plan.Name)
	if err != nil {
		return nil, err
	}
	if found {
		st.Lease = &lease
	}
	if spec.Service != "" {
		sel, err := kc.Selector(ctx, spec.Namespace, spec.Service)
		if err != nil {
			return nil, err
		}
		st.Service = fmt.Sprintf("%s selects %s", spec.Service, kube.FormatSelector(sel))
	}
	ws, err := kc.Resolve(spec.Restart)
	if err != nil {
		return nil, err
	}
	for _, w := range ws {
		msg, _, err := kc.RolloutStatus(ctx, spec.Namespace, w)
		if err != nil {
			msg = err.Error()
		}
		if st.Rollouts == nil {
			st.Rollouts = map[string]string{}
		}
		st.Rollouts[w.String()] = msg
	}
	return st, nil
}

// Lines are the status for a person.
func (st *KubeStatus) Lines(now time.Time) []string {
	if st.Error != "" {
		return []string{fmt.Sprintf("namespace %s cannot be read: %s", st.Namespace, st.Error)}
	}
	var out []string
	if l := st.Lease; l != nil {
		switch {
		case l.Held(now):
			out = append(out, fmt.Sprintf("lease %s/%s: held by %s, renewed %s, expires %s", st.Namespace, st.LeaseName, l.Holder,
				l.Renewed.Local().Format(time.TimeOnly), l.Expires.Local().Format(time.TimeOnly)))
		case l.Holder != "":
			out = append(out, fmt.Sprintf("lease %s/%s: %s stopped renewing it at %s (expired)", st.Namespace, st.LeaseName, l.Holder, l.Renewed.Local().Format(time.TimeOnly)))
		default:
			out = append(out, fmt.Sprintf("lease %s/%s: free", st.Namespace, st.LeaseName))
		}
		for _, d := range l.Record.Done {
			out = append(out, "done: "+d)
		}
	}
	if st.Service != "" {
		out = append(out, "service "+st.Service)
	}
	for _, w := range slices.Sorted(maps.Keys(st.Rollouts)) {
		out = append(out, fmt.Sprintf("%s: %s", w, strings.TrimSpace(st.Rollouts[w])))
	}
	return out
}
