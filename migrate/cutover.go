package migrate

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/shardctl/shardctl/internal/backlog"
	pb "github.com/shardctl/shardctl/internal/gatewaypb"
	"github.com/shardctl/shardctl/internal/human"
	"github.com/shardctl/shardctl/internal/physicaltenant"
	"github.com/shardctl/shardctl/internal/registry/registryapi"
	"github.com/shardctl/shardctl/internal/registry/registryclient"
	"github.com/shardctl/shardctl/internal/shardconn"
	"github.com/shardctl/shardctl/internal/signals"
	"github.com/shardctl/shardctl/migrate/drain"
	"github.com/shardctl/shardctl/migrate/kube"
)

// A cutover is a drain-out: new instances move from the From pool to the
// To pool step by step while gates watch, then From drains until it holds
// nothing. Zeebe cannot move a running instance, so From keeps serving
// every key it owns until then. The record in the registry says which
// step is complete, so an apply that dies is resumed by the next one; a
// lease keeps a second apply out meanwhile.

// Errors that end an apply, each with its own exit code (commands/).
var (
	// ErrPaused: the cutover waits for `cutover promote`.
	ErrPaused = errors.New("paused")
	// ErrInconclusive: a gate had no data under noData: inconclusive; the
	// cutover is paused at the weights it had.
	ErrInconclusive = errors.New("inconclusive")
	// ErrRolledBack: a gate failed (or an operator rolled back); new
	// instances go to From again.
	ErrRolledBack = errors.New("rolled back")
	// ErrRefused: preflight failed, another apply holds the cutover, or a
	// plan no longer matches the registry. Nothing moved.
	ErrRefused = errors.New("refused")
)

// Progress is what a cutover saw, kept in its record for status.
type Progress struct {
	// Run names this run of the cutover (apply after a rollback starts
	// another): the Kubernetes record on the Lease is of one run.
	Run          string                 `json:"run,omitempty"`
	Promoted     bool                   `json:"promoted,omitempty"`
	Inconclusive string                 `json:"inconclusive,omitempty"`
	StepStarted  *time.Time             `json:"stepStarted,omitempty"`
	Gates        map[string]Measurement `json:"gates,omitempty"`
	Drain        map[string]drain.Event `json:"drain,omitempty"`
}

// ProgressOf reads a record's progress.
func ProgressOf(rec registryapi.Cutover) Progress {
	var p Progress
	if len(rec.Status) > 0 {
		_ = json.Unmarshal(rec.Status, &p)
	}
	return p
}

// PlanOf reads the plan a record runs.
func PlanOf(rec registryapi.Cutover) (Plan, error) {
	var p Plan
	if err := json.Unmarshal(rec.Spec, &p); err != nil {
		return Plan{}, fmt.Errorf("cutover %s: its plan: %w", rec.Name, err)
	}
	for i := range p.Gates {
		if err := p.Gates[i].Compile(); err != nil {
			return Plan{}, fmt.Errorf("cutover %s: %w", rec.Name, err)
		}
	}
	return p, nil
}

// record reads the cutover called name and the plan it runs.
func (r *Runner) record(ctx context.Context, name string) (registryapi.Cutover, Plan, error) {
	rec, err := r.Registry.Cutover(ctx, name)
	if err != nil {
		return rec, Plan{}, err
	}
	plan, err := PlanOf(rec)
	return rec, plan, err
}

// Cutover events.
const (
	CutoverStarted      = "started"
	CutoverResumed      = "resumed"
	CutoverCheck        = "check"
	CutoverClients      = "clients"
	CutoverStep         = "step"
	CutoverWeights      = "weights"
	CutoverGate         = "gate"
	CutoverPaused       = "paused"
	CutoverInconclusive = "inconclusive"
	CutoverDrain        = "drain"
	CutoverDone         = "done"
	CutoverRolledBack   = "rolledback"
	CutoverFailed       = "failed"
)

// CutoverEvent is one thing a cutover did or saw: the audit trail.
type CutoverEvent struct {
	At       time.Time      `json:"at"`
	Cutover  string         `json:"cutover"`
	Event    string         `json:"event"`
	Phase    string         `json:"phase"`
	Step     int            `json:"step"` // 0-based, of Of
	Of       int            `json:"of"`
	StepName string         `json:"stepName"`
	Weights  map[string]int `json:"weights,omitempty"`
	Gate     *Measurement   `json:"gate,omitempty"`
	Drain    *drain.Event   `json:"drain,omitempty"`
	// Change is a write to Kubernetes (clients events).
	Change *kube.Change `json:"change,omitempty"`
	// Until is when a weight step's hold ends (weights and gate events of
	// a weight step), Next the step that follows it.
	Until   *time.Time `json:"until,omitempty"`
	Next    string     `json:"next,omitempty"`
	Message string     `json:"message,omitempty"`
}

// Line is the event for a person.
func (e CutoverEvent) Line() string {
	head := fmt.Sprintf("cutover %s [%d/%d %s]", e.Cutover, e.Step+1, e.Of, e.StepName)
	switch e.Event {
	case CutoverWeights:
		return fmt.Sprintf("%s weights %s%s", head, human.Weights(e.Weights), e.holding())
	case CutoverGate:
		g := e.Gate
		line := fmt.Sprintf("%s gate %s: %s = %s: %s", head, g.Gate, g.Query, formatResult(g.Result), g.Phase)
		if g.Message != "" {
			line += " (" + g.Message + ")"
		}
		return line + e.holding()
	case CutoverDrain:
		return head + " " + e.Drain.Line()
	case CutoverClients:
		if e.Change != nil {
			return head + " " + e.Change.Line()
		}
	}
	return fmt.Sprintf("%s %s: %s", head, e.Event, e.Message)
}

// holding says how long a weight step holds and what follows it.
func (e CutoverEvent) holding() string {
	if e.Until == nil {
		return ""
	}
	s := "; holding until " + e.Until.Local().Format(time.TimeOnly)
	if e.Next != "" {
		s += ", next " + e.Next
	}
	return s
}

// Runner runs cutovers: apply, promote, rollback.
type Runner struct {
	Registry CutoverRegistry
	Sources  Sources
	// Backlog reads shards for the drain (and what the target pool holds
	// when it rolls back).
	Backlog backlog.Reader
	// Holder names this process in the lease (DefaultHolder when empty);
	// LeaseTTL is how long the lease lasts without renewal.
	Holder   string
	LeaseTTL time.Duration
	// Poll and StuckAfter are the drain's.
	Poll       time.Duration
	StuckAfter int
	// Shards is how the preflight reaches the target pool's gateways:
	// each shard's TLS mode and credential as its registry metadata names
	// them, as the proxy reaches it (nil: plain text, no credential).
	Shards *shardconn.Access
	// Kube is the cluster a plan with a Kubernetes step changes (nil in
	// registry mode); RolloutPoll how often a rollout is read.
	Kube        *kube.Cluster
	KubeErr     error // why Kube is nil, if it is
	RolloutPoll time.Duration
	OnEvent     func(CutoverEvent)
}

// Close ends what the runner holds: its credentials' refresh (Shards).
func (r *Runner) Close() { r.Shards.Close() }

// DefaultLeaseTTL is how long a cutover lease lasts without renewal.
const DefaultLeaseTTL = 15 * time.Second

// DefaultHolder names this process: host/pid/random.
func DefaultHolder() string {
	host, _ := os.Hostname()
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%s/%d/%s", host, os.Getpid(), hex.EncodeToString(b))
}

// gone reports whether a lease holder is a process of this machine that
// no longer runs.
func gone(holder string) bool {
	parts := strings.Split(holder, "/")
	host, _ := os.Hostname()
	if len(parts) != 3 || parts[0] != host {
		return false
	}
	pid, err := strconv.Atoi(parts[1])
	if err != nil || pid <= 0 || pid == os.Getpid() {
		return false
	}
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

func (r *Runner) holder() string {
	if r.Holder == "" {
		r.Holder = DefaultHolder()
	}
	return r.Holder
}

func (r *Runner) emit(rec registryapi.Cutover, plan Plan, step int, event, msg string, f func(*CutoverEvent)) {
	if r.OnEvent == nil {
		return
	}
	step = min(step, plan.Total()-1) // a done cutover is at its last step
	e := CutoverEvent{At: time.Now(), Cutover: rec.Name, Event: event, Phase: rec.Phase, Step: step, Of: plan.Total(),
		StepName: plan.StepName(step), Message: msg}
	if f != nil {
		f(&e)
	}
	r.OnEvent(e)
}

// Check measures every gate once, before anything is written: a bad
// query or an unreachable Prometheus is found while nothing has changed.
func (r *Runner) Check(ctx context.Context, plan Plan) error {
	shards, err := r.poolShards(ctx, plan)
	if err != nil {
		return err
	}
	m, err := newMeasurer(r.Sources, shards, time.Duration(plan.GateWindow))
	if err != nil {
		return fmt.Errorf("%w: %v", ErrBadInput, err)
	}
	defer m.close()
	for i := range plan.Gates {
		g := &plan.Gates[i]
		if g.Signal != "" {
			continue // signals are read in the preflight, once sampled
		}
		q, _ := g.Resolve(plan.pools())
		if _, err := m.query(ctx, q); err != nil {
			var bq *BadQueryError
			if errors.As(err, &bq) || errors.Is(err, errNoPrometheus) {
				return fmt.Errorf("%w: gate %s: %v", ErrBadInput, g.Name, err)
			}
			return fmt.Errorf("gate %s: %w", g.Name, err)
		}
	}
	return nil
}

// poolShards are the registry's shards of both pools now.
func (r *Runner) poolShards(ctx context.Context, plan Plan) ([]registryapi.Shard, error) {
	all, err := r.Registry.Shards(ctx, plan.App)
	if err != nil {
		return nil, err
	}
	var out []registryapi.Shard
	for _, s := range all {
		if s.Pool == plan.From || s.Pool == plan.To {
			out = append(out, s)
		}
	}
	return out, nil
}

// Apply starts a cutover, or resumes the one in progress under the
// plan's name (with the plan it was started with).
func (r *Runner) Apply(ctx context.Context, plan Plan) (registryapi.Cutover, error) {
	rec, err := r.Registry.Cutover(ctx, plan.Name)
	switch {
	case err != nil && !registryclient.IsNotFound(err):
		return registryapi.Cutover{}, err
	case err == nil && rec.Phase == registryapi.PhaseDone:
		r.emit(rec, plan, plan.Total()-1, CutoverDone, "already done: nothing to change", nil)
		return rec, nil
	case err == nil && !registryapi.Final(rec.Phase):
		if plan, err = PlanOf(rec); err != nil {
			return rec, err
		}
		r.emit(rec, plan, rec.Step, CutoverResumed, fmt.Sprintf("resuming at step %d of %d", rec.Step+1, plan.Total()), nil)
	default: // none, or one that failed or was rolled back: start anew
		if err := r.Check(ctx, plan); err != nil {
			return registryapi.Cutover{}, err
		}
		spec, err := json.Marshal(plan)
		if err != nil {
			return registryapi.Cutover{}, err
		}
		status, _ := json.Marshal(Progress{Run: time.Now().UTC().Format(time.RFC3339Nano)})
		rec, err = r.Registry.PutCutover(ctx, registryapi.Cutover{Name: plan.Name, App: plan.App, From: plan.From, To: plan.To,
			Weights: map[string]int{plan.From: 100, plan.To: 0}, Phase: registryapi.PhasePending, Spec: spec, Status: status, Holder: r.holder(),
			Version: 0})
		if err != nil {
			if errors.Is(err, registryapi.ErrConflict) || errors.Is(err, registryapi.ErrLeased) {
				return registryapi.Cutover{}, fmt.Errorf("%w: %v", ErrRefused, err)
			}
			return registryapi.Cutover{}, err
		}
		r.emit(rec, plan, 0, CutoverStarted, fmt.Sprintf("from %s to %s in %d steps", plan.From, plan.To, plan.Total()), nil)
	}
	return r.run(ctx, plan, rec)
}

// Promote lets a paused cutover go on, and runs it to its end.
func (r *Runner) Promote(ctx context.Context, name string) (registryapi.Cutover, error) {
	rec, plan, err := r.record(ctx, name)
	if err != nil {
		return rec, err
	}
	switch {
	case rec.Phase == registryapi.PhaseDone:
		r.emit(rec, plan, plan.Total()-1, CutoverDone, "already done: nothing to promote", nil)
		return rec, nil
	case registryapi.Final(rec.Phase):
		return rec, fmt.Errorf("%w: cutover %s is %s: apply it again to start over", ErrRefused, name, rec.Phase)
	}
	return r.run(ctx, plan, rec, func(p *Progress) { p.Promoted, p.Inconclusive = true, "" })
}

// run takes the lease and runs the plan from the first step the record
// has not completed. before changes the progress once the lease is held.
func (r *Runner) run(ctx context.Context, plan Plan, rec registryapi.Cutover, before ...func(*Progress)) (registryapi.Cutover, error) {
	// The Kubernetes Lease first: a second apply is refused by it, naming
	// the holder; one that took it from a holder that stopped renewing may
	// take that holder's registry lease too.
	lock, from, err := r.kubeLock(ctx, plan, false)
	if err != nil {
		return rec, err
	}
	if lock != nil {
		defer r.releaseKube(ctx, lock)
	}
	if rec, err = r.lease(ctx, rec, from); err != nil {
		return rec, err
	}
	runCtx, cancel := context.WithCancelCause(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { r.renew(runCtx, cancel, rec.Name, lock) })
	defer func() {
		cancel(nil)
		wg.Wait()
		release, done := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_ = r.Registry.ReleaseCutover(release, rec.Name, r.holder())
		done()
	}()
	s := &session{r: r, plan: plan, rec: rec, lock: lock}
	if len(before) > 0 {
		if err := s.save(runCtx, func(c *registryapi.Cutover, p *Progress) {
			for _, f := range before {
				f(p)
			}
			if c.Phase == registryapi.PhasePaused {
				c.Phase, c.Message = registryapi.PhaseProgressing, "promoted"
			}
		}); err != nil {
			return s.rec, err
		}
	}
	err = s.steps(runCtx)
	if cause := context.Cause(runCtx); err != nil && cause != nil && !errors.Is(cause, context.Canceled) {
		err = cause // the lease was lost: say so, not "context canceled"
	}
	return s.rec, err
}

// lease takes the record's lease, from a holder that died on this machine
// if it must; a live holder refuses the apply.
func (r *Runner) lease(ctx context.Context, rec registryapi.Cutover, replace string) (registryapi.Cutover, error) {
	ttl := r.LeaseTTL
	if ttl <= 0 {
		ttl = DefaultLeaseTTL
	}
	got, err := r.Registry.LeaseCutover(ctx, rec.Name, r.holder(), ttl, replace)
	if err != nil && errors.Is(err, registryapi.ErrLeased) && replace != "" {
		replace = "" // not the holder named: the live holder decides below
		got, err = r.Registry.LeaseCutover(ctx, rec.Name, r.holder(), ttl, "")
	}
	if err != nil && replace == "" && errors.Is(err, registryapi.ErrLeased) {
		cur, rerr := r.Registry.Cutover(ctx, rec.Name)
		if rerr == nil && gone(cur.Holder) {
			return r.lease(ctx, rec, cur.Holder)
		}
		if rerr == nil && cur.LeaseExpires != nil {
			return rec, fmt.Errorf("%w: cutover %s is run by %s (lease until %s); wait for it, or run cutover status --watch",
				ErrRefused, rec.Name, cur.Holder, cur.LeaseExpires.Local().Format(time.TimeOnly))
		}
		return rec, fmt.Errorf("%w: %v", ErrRefused, err)
	}
	return got, err
}

// renew keeps the lease until ctx ends; losing it stops the run.
func (r *Runner) renew(ctx context.Context, stop context.CancelCauseFunc, name string, lock *kube.Lock) {
	ttl := r.LeaseTTL
	if ttl <= 0 {
		ttl = DefaultLeaseTTL
	}
	t := time.NewTicker(ttl / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var err error
		if lock != nil {
			if err = lock.Renew(ctx); err != nil && !errors.Is(err, kube.ErrLost) {
				err = nil // unreachable: retried, as the registry is
			}
		}
		// Only another holder ends the run: an unreachable registry is
		// retried, and if the lease lapses meanwhile the next write says so.
		if err == nil {
			_, err = r.Registry.LeaseCutover(ctx, name, r.holder(), ttl, "")
		}
		if err != nil && (errors.Is(err, registryapi.ErrLeased) || errors.Is(err, kube.ErrLost)) {
			cur, rerr := r.Registry.Cutover(ctx, name)
			if rerr == nil && cur.Phase == registryapi.PhaseRolledBack {
				stop(fmt.Errorf("%w by %s: %s", ErrRolledBack, cur.Holder, cur.Message))
			} else {
				stop(fmt.Errorf("%w: lost the lease of cutover %s: %v", ErrRefused, name, err))
			}
			return
		}
	}
}

// session is one run of a plan under the lease.
type session struct {
	r    *Runner
	plan Plan
	rec  registryapi.Cutover
	m    *measurer
	lock *kube.Lock // the Kubernetes Lease, with a Kubernetes step
}

// save writes a change of the record (and its progress), reading it again
// when it moved on (a lease renewal); an operator's rollback meanwhile
// ends the run.
func (s *session) save(ctx context.Context, change func(*registryapi.Cutover, *Progress)) error {
	for attempt := 0; ; attempt++ {
		next := s.rec.Clone()
		p := ProgressOf(next)
		change(&next, &p)
		next.Status, _ = json.Marshal(p)
		next.Holder = s.r.holder()
		got, err := s.r.Registry.PutCutover(ctx, next)
		if err == nil {
			s.rec = got
			return nil
		}
		leased := errors.Is(err, registryapi.ErrLeased)
		if !leased && !errors.Is(err, registryapi.ErrConflict) || attempt == 5 {
			return fmt.Errorf("write cutover %s: %w", s.rec.Name, err)
		}
		fresh, rerr := s.r.Registry.Cutover(ctx, s.rec.Name)
		if rerr != nil {
			return rerr
		}
		if fresh.Phase == registryapi.PhaseRolledBack && s.rec.Phase != registryapi.PhaseRolledBack {
			s.rec = fresh
			return fmt.Errorf("%w by %s: %s", ErrRolledBack, fresh.Holder, fresh.Message)
		}
		if leased {
			return fmt.Errorf("%w: lost the lease of cutover %s: %v", ErrRefused, s.rec.Name, err)
		}
		s.rec = fresh
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(attempt+1) * 20 * time.Millisecond):
		}
	}
}

func (s *session) emit(step int, event, msg string, f func(*CutoverEvent)) {
	s.r.emit(s.rec, s.plan, step, event, msg, f)
}

// steps runs every step the record has not completed.
func (s *session) steps(ctx context.Context) error {
	shards, err := s.r.poolShards(ctx, s.plan)
	if err != nil {
		return err
	}
	s.m, err = newMeasurer(s.r.Sources, shards, time.Duration(s.plan.GateWindow))
	if err != nil {
		return err
	}
	defer s.m.close()
	for k := s.rec.Step; k < s.plan.Total()-1; k++ {
		var err error
		switch kind, j := s.plan.stepAt(k); kind {
		case stepPreflight:
			err = s.preflight(ctx)
		case stepClients:
			err = s.clients(ctx, k)
		case stepWeights:
			err = s.weightStep(ctx, k, j)
		default:
			err = s.drain(ctx, k)
		}
		if err != nil {
			return err
		}
		if err := s.save(ctx, func(c *registryapi.Cutover, p *Progress) { c.Step = k + 1; p.StepStarted = nil }); err != nil {
			return err
		}
	}
	done := fmt.Sprintf("new instances go to %s; %s is OUT_OF_SERVICE", s.plan.To, s.plan.From)
	if err := s.save(ctx, func(c *registryapi.Cutover, _ *Progress) {
		c.Phase, c.Step, c.Message = registryapi.PhaseDone, s.plan.Total(), done
		c.Weights = map[string]int{s.plan.From: 0, s.plan.To: 100}
	}); err != nil {
		return err
	}
	s.emit(s.plan.Total()-1, CutoverDone, done, nil)
	return nil
}

// fail ends the cutover before any weight moved: Failed, with why.
func (s *session) fail(ctx context.Context, step int, why string) error {
	if err := s.save(ctx, func(c *registryapi.Cutover, _ *Progress) { c.Phase, c.Message = registryapi.PhaseFailed, why }); err != nil {
		return err
	}
	s.emit(step, CutoverFailed, why, nil)
	return fmt.Errorf("%w: %s", ErrRefused, why)
}

// unservedAfter finds a physical tenant that a shard of pool from serves
// and no shard of pool to: ok false names it.
func unservedAfter(shards []registryapi.Shard, from, to string) (tenant string, ok bool) {
	var target [][]string
	for _, sh := range shards {
		if sh.Pool == to {
			target = append(target, registryapi.PhysicalTenants(sh.Metadata))
		}
	}
	for _, sh := range shards {
		if sh.Pool != from {
			continue
		}
		list := registryapi.PhysicalTenants(sh.Metadata)
		if len(list) == 0 {
			list = []string{physicaltenant.Default}
		}
		for _, t := range list {
			if !slices.ContainsFunc(target, func(l []string) bool { return physicaltenant.Serves(l, t) }) {
				return t, false
			}
		}
	}
	return "", true
}

// preflight: every target shard UP with a healthy topology and the whole
// ledger replayed; the target pool's signals ok; every gate answers.
func (s *session) preflight(ctx context.Context) error {
	if err := s.save(ctx, func(c *registryapi.Cutover, _ *Progress) { c.Phase = registryapi.PhaseProgressing }); err != nil {
		return err
	}
	check := func(msg string) { s.emit(0, CutoverCheck, msg, nil) }
	shards, err := s.r.poolShards(ctx, s.plan)
	if err != nil {
		return err
	}
	deps, err := s.r.Registry.Deployments(ctx)
	if err != nil {
		return err
	}
	if t, ok := unservedAfter(shards, s.plan.From, s.plan.To); !ok {
		return s.fail(ctx, 0, fmt.Sprintf("preflight: %s serves physical tenant %s and no shard of %s does: its work could not move", s.plan.From, t, s.plan.To))
	}
	var to []string
	for _, sh := range shards {
		if sh.Pool != s.plan.To {
			continue
		}
		to = append(to, sh.ID)
		if !takesCutover(sh.State) {
			return s.fail(ctx, 0, fmt.Sprintf("preflight: %s is %s: want UP, or OUT_OF_SERVICE until the first step", sh.ID, sh.State))
		}
		t, err := s.r.Shards.Target(sh.ID, sh.Address, sh.Metadata[registryapi.MetaTLS], sh.Metadata[registryapi.MetaCredential])
		if err == nil {
			err = GatewayTopology(ctx, t)
		}
		if err != nil {
			return s.fail(ctx, 0, fmt.Sprintf("preflight: %s: %v", sh.ID, err))
		}
		served := registryapi.PhysicalTenants(sh.Metadata)
		for _, d := range deps {
			if !physicaltenant.Serves(served, d.PhysicalTenant) {
				continue // the proxy replays a deployment only to its tenant's shards
			}
			for _, p := range d.Processes {
				if _, ok := p.Keys[sh.ID]; !ok {
					return s.fail(ctx, 0, fmt.Sprintf("preflight: %s was not replayed deployment %d (%s v%d) of the ledger: is the proxy following the registry?", sh.ID, d.Seq, p.BpmnProcessID, p.Version))
				}
			}
		}
		check(fmt.Sprintf("%s UP, topology healthy, %d deployments replayed", sh.ID, len(deps)))
	}
	if err := s.m.ready(ctx); err != nil {
		return s.fail(ctx, 0, fmt.Sprintf("preflight: the shards' metrics cannot be read: %v", err))
	}
	r, any, err := s.m.poolSignals(ctx, to, time.Duration(s.plan.GateWindow))
	switch {
	case err != nil:
		return s.fail(ctx, 0, fmt.Sprintf("preflight: signals of %s: %v", s.plan.To, err))
	case !any:
		return s.fail(ctx, 0, fmt.Sprintf("preflight: no signals from %s (%s): missing data never passes", s.plan.To, strings.Join(to, ", ")))
	case len(r.Unknown) > 0:
		return s.fail(ctx, 0, fmt.Sprintf("preflight: no current signals from %s: missing data never passes", strings.Join(r.Unknown, ", ")))
	case r.Level != signals.OK:
		var why []string
		for _, sh := range r.Shards {
			if sh.Level != signals.OK {
				why = append(why, fmt.Sprintf("%s %s: %s", sh.Name, sh.Level, strings.Join(sh.Reasons, "; ")))
			}
		}
		return s.fail(ctx, 0, fmt.Sprintf("preflight: %s is %s over %v: %s", s.plan.To, r.Level, time.Duration(s.plan.GateWindow), strings.Join(why, "; ")))
	}
	check(fmt.Sprintf("signals of %s ok over %v", s.plan.To, time.Duration(s.plan.GateWindow)))
	for i := range s.plan.Gates {
		g := &s.plan.Gates[i]
		m := s.m.measure(ctx, g, s.plan.pools(), time.Duration(s.plan.GateWindow))
		s.emit(0, CutoverGate, "", func(e *CutoverEvent) { e.Gate = &m })
		switch m.Phase {
		case Inconclusive:
			return s.inconclusive(ctx, 0, fmt.Sprintf("gate %s: %s", g.Name, m.Message))
		case Failed, Errored:
			return s.fail(ctx, 0, fmt.Sprintf("preflight: gate %s: %s = %s: %s", g.Name, m.Query, formatResult(m.Result), m.Message))
		}
	}
	return nil
}

// inconclusive pauses the cutover where it is (weights unchanged).
func (s *session) inconclusive(ctx context.Context, step int, why string) error {
	if err := s.save(ctx, func(c *registryapi.Cutover, p *Progress) {
		c.Phase, c.Message, p.Inconclusive = registryapi.PhasePaused, "inconclusive: "+why, why
	}); err != nil {
		return err
	}
	s.emit(step, CutoverInconclusive, why+": paused; cutover promote goes on, cutover rollback goes back", nil)
	return fmt.Errorf("%w: %s", ErrInconclusive, why)
}

// pause stops before step k for `cutover promote`.
func (s *session) pause(ctx context.Context, k int) error {
	msg := fmt.Sprintf("paused before %s: run cutover promote %s to go on", s.plan.StepName(k), s.plan.Name)
	if err := s.save(ctx, func(c *registryapi.Cutover, _ *Progress) { c.Phase, c.Message = registryapi.PhasePaused, msg }); err != nil {
		return err
	}
	s.emit(k, CutoverPaused, strings.TrimPrefix(msg, "paused "), nil)
	return fmt.Errorf("%w %s", ErrPaused, strings.TrimPrefix(msg, "paused "))
}

// weightStep sets the weights of weight step j (step k of the plan) and
// holds them while the gates measure; a gate that fails rolls back.
func (s *session) weightStep(ctx context.Context, k, j int) error {
	if j == len(s.plan.Steps) && s.plan.PauseBefore == PausePromote && !ProgressOf(s.rec).Promoted {
		return s.pause(ctx, k)
	}
	w := s.plan.weightsAt(j)
	now := time.Now()
	if err := s.save(ctx, func(c *registryapi.Cutover, p *Progress) {
		c.Phase, c.Weights, c.Message = registryapi.PhaseProgressing, w, ""
		p.StepStarted = &now
	}); err != nil {
		return err
	}
	hold := time.Duration(s.plan.StepPause)
	end := now.Add(hold)
	holding := func(e *CutoverEvent) { e.Until, e.Next = &end, s.plan.StepName(k+1) }
	s.emit(k, CutoverWeights, "", func(e *CutoverEvent) { e.Weights = w; holding(e) })
	// Target shards held OUT_OF_SERVICE come in now, behind the weights.
	shards, err := s.r.poolShards(ctx, s.plan)
	if err != nil {
		return err
	}
	for _, sh := range shards {
		if sh.Pool == s.plan.To && sh.State == registryapi.StateOutOfService {
			if _, err := s.r.Registry.SetState(ctx, s.plan.App, sh.ID, registryapi.StateUp); err != nil {
				return fmt.Errorf("set %s UP: %w", sh.ID, err)
			}
			s.emit(k, CutoverCheck, sh.ID+" UP: it takes its share of the new instances from now", nil)
		}
	}
	tallies := make([]tally, len(s.plan.Gates))
	next := make([]time.Time, len(s.plan.Gates))
	for i := range next {
		next[i] = now.Add(min(time.Duration(s.plan.Gates[i].Interval), hold))
	}
	for {
		due := end
		for i, t := range next {
			if g := s.plan.Gates[i]; (g.Count == 0 || tallies[i].taken < g.Count) && t.Before(due) {
				due = t
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Until(due)):
		}
		for i := range s.plan.Gates {
			g := &s.plan.Gates[i]
			if (g.Count > 0 && tallies[i].taken >= g.Count) || time.Now().Before(next[i]) {
				continue
			}
			next[i] = time.Now().Add(time.Duration(g.Interval))
			m := s.m.measure(ctx, g, s.plan.pools(), time.Duration(s.plan.GateWindow))
			s.emit(k, CutoverGate, "", func(e *CutoverEvent) { e.Gate = &m; holding(e) })
			if err := s.save(ctx, func(_ *registryapi.Cutover, p *Progress) {
				if p.Gates == nil {
					p.Gates = map[string]Measurement{}
				}
				p.Gates[g.Name] = m
			}); err != nil {
				return err
			}
			if m.Phase == Inconclusive {
				return s.inconclusive(ctx, k, fmt.Sprintf("gate %s: %s", g.Name, m.Message))
			}
			if failed, why := tallies[i].add(g, m); failed {
				return s.rollback(ctx, k, why)
			}
		}
		if !time.Now().Before(end) {
			return nil
		}
	}
}

// rollback sends new instances back to From at once (a failed gate).
func (s *session) rollback(ctx context.Context, k int, why string) error {
	w := map[string]int{s.plan.From: 100, s.plan.To: 0}
	msg := fmt.Sprintf("%s: new instances go to %s again; %s keeps and finishes %s", why, s.plan.From, s.plan.To, s.r.held(ctx, s.plan.To))
	if err := s.save(ctx, func(c *registryapi.Cutover, _ *Progress) {
		c.Phase, c.Weights, c.Message = registryapi.PhaseRolledBack, w, msg
	}); err != nil {
		return err
	}
	s.emit(k, CutoverRolledBack, msg, func(e *CutoverEvent) { e.Weights = w })
	return fmt.Errorf("%w: %s", ErrRolledBack, why)
}

// held says how many instances a pool's shards hold, as far as they can
// be read.
func (r *Runner) held(ctx context.Context, pool string) string {
	if r.Backlog == nil {
		return "the instances it already took"
	}
	shards, err := r.Registry.Shards(ctx, "")
	if err != nil {
		return "the instances it already took"
	}
	var n float64
	for _, sh := range shards {
		if sh.Pool != pool {
			continue
		}
		b := r.Backlog.Read(ctx, backlog.Target{Shard: sh.ID, MetricsURL: sh.Metadata[registryapi.MetaMetrics]})
		if !b.Known() {
			return "the instances it already took"
		}
		n += b.InFlight
	}
	return fmt.Sprintf("the %.0f instances it already took", n)
}

// drain empties From: DRAINING, followed until empty, OUT_OF_SERVICE.
func (s *session) drain(ctx context.Context, k int) error {
	if s.plan.PauseBefore == PauseDrain && !ProgressOf(s.rec).Promoted {
		return s.pause(ctx, k)
	}
	if err := s.save(ctx, func(c *registryapi.Cutover, _ *Progress) { c.Phase, c.Message = registryapi.PhaseDraining, "" }); err != nil {
		return err
	}
	var from []string
	for _, sh := range s.plan.FromShards {
		from = append(from, sh.ID)
	}
	d := &drain.Helper{Registry: s.r.Registry, App: s.plan.App, Backlog: s.r.Backlog, Poll: s.r.Poll, StuckAfter: s.r.StuckAfter, Shards: s.r.Shards,
		OnEvent: func(e drain.Event) {
			s.emit(k, CutoverDrain, "", func(ce *CutoverEvent) { ce.Drain = &e })
			_ = s.save(ctx, func(_ *registryapi.Cutover, p *Progress) {
				if p.Drain == nil {
					p.Drain = map[string]drain.Event{}
				}
				p.Drain[e.Shard] = e
			})
		}}
	shards, err := d.Begin(ctx, from)
	if err != nil {
		return err
	}
	dctx, cancel := context.WithTimeout(ctx, time.Duration(s.plan.DrainTimeout))
	defer cancel()
	return d.Wait(dctx, shards)
}

// RollbackOptions say how far a rollback goes.
type RollbackOptions struct {
	// DrainTarget drains To as `drain --wait` does, within DrainTimeout.
	DrainTarget  bool
	DrainTimeout time.Duration
	// KeepClients leaves the clients step's changes in Kubernetes as they
	// are (clients keep reaching the proxy, which places new instances on
	// From again): for when To holds instances whose keys clients keep.
	KeepClients bool
}

// Rollback sends a cutover's new work back to From at once and undrains
// From, then restores what its clients step changed in Kubernetes. It
// preempts a running apply, and is idempotent.
func (r *Runner) Rollback(ctx context.Context, name string, o RollbackOptions) (registryapi.Cutover, error) {
	rec, plan, err := r.record(ctx, name)
	if err != nil {
		return rec, err
	}
	if rec, err = r.lease(ctx, rec, rec.Holder); err != nil {
		return rec, err
	}
	defer func() {
		release, done := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_ = r.Registry.ReleaseCutover(release, name, r.holder())
		done()
	}()
	s := &session{r: r, plan: plan, rec: rec}
	w := map[string]int{plan.From: 100, plan.To: 0}
	msg := fmt.Sprintf("rolled back by cutover rollback: new instances go to %s again; %s keeps and finishes %s", plan.From, plan.To, r.held(ctx, plan.To))
	if err := s.save(ctx, func(c *registryapi.Cutover, _ *Progress) {
		c.Phase, c.Weights, c.Message = registryapi.PhaseRolledBack, w, msg
	}); err != nil {
		return s.rec, err
	}
	s.emit(rec.Step, CutoverRolledBack, msg, func(e *CutoverEvent) { e.Weights = w })
	// The Kubernetes Lease once the record says RolledBack, so that the
	// apply it preempts says why it stopped.
	lock, _, err := r.kubeLock(ctx, plan, true)
	if err != nil {
		return s.rec, fmt.Errorf("the weights are back on %s; the clients are not: %w", plan.From, err)
	}
	if lock != nil {
		defer r.releaseKube(ctx, lock)
	}
	s.lock = lock
	shards, err := r.poolShards(ctx, plan)
	if err != nil {
		return s.rec, err
	}
	for _, sh := range shards {
		if sh.Pool == plan.From && (sh.State == registryapi.StateDraining || sh.State == registryapi.StateOutOfService) {
			if _, err := r.Registry.SetState(ctx, plan.App, sh.ID, registryapi.StateUp); err != nil {
				return s.rec, fmt.Errorf("undrain %s: %w", sh.ID, err)
			}
			s.emit(rec.Step, CutoverRolledBack, sh.ID+" UP again", nil)
		}
	}
	if !o.KeepClients {
		if err := s.restoreClients(ctx); err != nil {
			return s.rec, err
		}
	}
	if !o.DrainTarget {
		return s.rec, nil
	}
	var to []string
	for _, sh := range shards {
		if sh.Pool == plan.To {
			to = append(to, sh.ID)
		}
	}
	d := &drain.Helper{Registry: r.Registry, App: plan.App, Backlog: r.Backlog, Poll: r.Poll, StuckAfter: r.StuckAfter, Shards: r.Shards,
		OnEvent: func(e drain.Event) { s.emit(rec.Step, CutoverDrain, "", func(ce *CutoverEvent) { ce.Drain = &e }) }}
	drained, err := d.Begin(ctx, to)
	if err != nil {
		return s.rec, err
	}
	dctx, cancel := context.WithTimeout(ctx, or(o.DrainTimeout, DefaultDrainTimeout))
	defer cancel()
	return s.rec, d.Wait(dctx, drained)
}

// GatewayTopology checks a Zeebe gateway: every partition has a healthy
// leader.
func GatewayTopology(ctx context.Context, t shardconn.Target) error {
	addr := t.Addr
	conn, err := t.Dial()
	if err != nil {
		return err
	}
	defer conn.Close()
	tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	topo, err := pb.NewGatewayClient(conn).Topology(tctx, &pb.TopologyRequest{})
	if err != nil {
		return fmt.Errorf("gateway %s: topology: %w", addr, err)
	}
	healthy := map[int32]bool{}
	for _, b := range topo.GetBrokers() {
		for _, p := range b.GetPartitions() {
			if p.GetRole() == pb.Partition_LEADER && p.GetHealth() == pb.Partition_HEALTHY {
				healthy[p.GetPartitionId()] = true
			}
		}
	}
	for id := int32(1); id <= topo.GetPartitionsCount(); id++ {
		if !healthy[id] {
			return fmt.Errorf("gateway %s: partition %d has no healthy leader", addr, id)
		}
	}
	return nil
}
