package migrate

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/shardctl/shardctl/internal/ledger"
	"github.com/shardctl/shardctl/internal/proxy/proxyapi"
	"github.com/shardctl/shardctl/internal/registry/registryapi"
	"github.com/shardctl/shardctl/internal/registry/registryclient"
	"github.com/shardctl/shardctl/internal/signals"
	"github.com/shardctl/shardctl/migrate/drain"
	"github.com/shardctl/shardctl/migrate/kube"
	"github.com/shardctl/shardctl/probes/proxies"
)

// CutoverRegistry is what a cutover needs of the registry (registry.Client
// has it).
type CutoverRegistry interface {
	drain.Registry
	Cutovers(ctx context.Context, app string) ([]registryapi.Cutover, error)
	Cutover(ctx context.Context, name string) (registryapi.Cutover, error)
	PutCutover(ctx context.Context, c registryapi.Cutover) (registryapi.Cutover, error)
	LeaseCutover(ctx context.Context, name, holder string, ttl time.Duration, replace string) (registryapi.Cutover, error)
	ReleaseCutover(ctx context.Context, name, holder string) error
	Deployments(ctx context.Context) ([]ledger.Deployment, error)
}

// PlanOptions are what an operator asks of a cutover.
type PlanOptions struct {
	Name, App, From, To string
	// Steps are the percentages of new instances the target pool gets,
	// rising, the last 100.
	Steps        []int
	StepPause    time.Duration
	GateWindow   time.Duration
	DrainTimeout time.Duration
	// PauseBefore is "promote" (the last weight step) or "drain".
	PauseBefore string
	Gates       []Gate
	// Kube moves the clients in Kubernetes once green is ready (--mode
	// k8s); nil in registry mode.
	Kube *kube.Spec
}

// Plan defaults.
var (
	DefaultSteps = []int{10, 50, 100}
)

const (
	DefaultStepPause    = 5 * time.Minute
	DefaultGateWindow   = 5 * time.Minute
	DefaultDrainTimeout = 30 * time.Minute
	// DefaultRolloutTimeout is how long each restarted workload may take
	// to roll out.
	DefaultRolloutTimeout = 10 * time.Minute
	// PausePromote and PauseDrain are the points a cutover can pause at.
	PausePromote = "promote"
	PauseDrain   = "drain"
)

// ShardState is a shard as a plan saw it.
type ShardState struct {
	ID      string `json:"id"`
	State   string `json:"state"`
	Slot    int    `json:"slot"`
	Address string `json:"address"`
}

// Plan is what a cutover will do, made from the registry as it was.
type Plan struct {
	Name         string            `json:"name"`
	App          string            `json:"app"`
	From         string            `json:"from"`
	To           string            `json:"to"`
	Steps        []int             `json:"steps"`
	StepPause    signals.Duration  `json:"stepPause"`
	GateWindow   signals.Duration  `json:"gateWindow"`
	DrainTimeout signals.Duration  `json:"drainTimeout"`
	PauseBefore  string            `json:"pauseBefore,omitempty"`
	Gates        []Gate            `json:"gates"`
	Queries      map[string]string `json:"queries"` // by gate: the query it runs, resolved
	FromShards   []ShardState      `json:"fromShards"`
	ToShards     []ShardState      `json:"toShards"`
	Deployments  int               `json:"deployments"`
	// Fingerprint is of the state the plan was made from; apply --plan
	// refuses a plan whose state moved on.
	Fingerprint string `json:"fingerprint"`
	// Kube is the Kubernetes step (--mode k8s), absent in registry mode.
	Kube *kube.Spec `json:"kube,omitempty"`
	// Changes says whether applying it would change anything.
	Changes bool `json:"changes"`
	// Actions are what applying it does, in order.
	Actions []string `json:"actions"`
}

// Total is how many steps the plan has: preflight, the clients step in
// Kubernetes (--mode k8s), each weight step, the drain, done.
func (p Plan) Total() int { return len(p.Steps) + 3 + p.clientSteps() }

func (p Plan) clientSteps() int {
	if p.Kube != nil {
		return 1
	}
	return 0
}

// The kinds of step a plan has.
const (
	stepPreflight = "preflight"
	stepClients   = "clients"
	stepWeights   = "weights"
	stepDrain     = "drain"
	stepDone      = "done"
)

// stepAt is the kind of step k (0-based) and, for a weight step, which
// one (1-based).
func (p Plan) stepAt(k int) (kind string, weight int) {
	n, c := len(p.Steps), p.clientSteps()
	switch {
	case k == 0:
		return stepPreflight, 0
	case k <= c:
		return stepClients, 0
	case k <= n+c:
		return stepWeights, k - c
	case k == n+c+1:
		return stepDrain, 0
	}
	return stepDone, 0
}

// StepName names step k (0-based) of the plan.
func (p Plan) StepName(k int) string {
	kind, j := p.stepAt(k)
	switch {
	case kind == stepClients:
		return "clients: " + p.Kube.Target()
	case kind == stepWeights && j == len(p.Steps):
		return fmt.Sprintf("promote: %s %d%%", p.To, p.Steps[j-1])
	case kind == stepWeights:
		return fmt.Sprintf("weights: %s %d%%", p.To, p.Steps[j-1])
	case kind == stepDrain:
		return "drain " + p.From
	}
	return kind
}

// weightsAt are the pool weights of weight step j (1-based).
func (p Plan) weightsAt(j int) map[string]int {
	to := p.Steps[j-1]
	return map[string]int{p.From: 100 - to, p.To: to}
}

// ErrBadInput is a plan that cannot be made from what was asked.
var ErrBadInput = errors.New("bad input")

// Validate checks what can be checked of the options without the
// registry: the command line's own mistakes.
func (o PlanOptions) Validate() error {
	if o.From == "" || o.To == "" || o.From == o.To {
		return fmt.Errorf("%w: --from and --to name two different pools", ErrBadInput)
	}
	for i, s := range o.Steps {
		if s < 1 || s > 100 || (i > 0 && s <= o.Steps[i-1]) {
			return fmt.Errorf("%w: --steps %v: percentages from 1 to 100, rising", ErrBadInput, o.Steps)
		}
	}
	return o.ValidateRun()
}

// ValidateRun checks the options of how a plan runs, its pause and its
// durations: all a saved plan takes from a new command line.
func (o PlanOptions) ValidateRun() error {
	if o.PauseBefore != "" && o.PauseBefore != PausePromote && o.PauseBefore != PauseDrain {
		return fmt.Errorf("%w: --pause-before %q: want promote or drain", ErrBadInput, o.PauseBefore)
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"--step-pause", o.StepPause}, {"--gate-window", o.GateWindow}, {"--drain-timeout", o.DrainTimeout}} {
		if d.v < 0 {
			return fmt.Errorf("%w: %s %v: want a positive duration", ErrBadInput, d.flag, d.v)
		}
	}
	return nil
}

// MakePlan reads the registry and plans a cutover; nothing changes.
func MakePlan(ctx context.Context, r CutoverRegistry, o PlanOptions) (Plan, error) {
	if err := o.Validate(); err != nil {
		return Plan{}, err
	}
	steps := o.Steps
	if len(steps) == 0 {
		steps = DefaultSteps
	}
	if steps[len(steps)-1] != 100 {
		steps = append(slices.Clone(steps), 100)
	}
	p := Plan{Name: o.Name, App: strings.ToUpper(o.App), From: o.From, To: o.To, Steps: steps,
		StepPause: signals.Duration(or(o.StepPause, DefaultStepPause)), GateWindow: signals.Duration(or(o.GateWindow, DefaultGateWindow)),
		DrainTimeout: signals.Duration(or(o.DrainTimeout, DefaultDrainTimeout)), PauseBefore: o.PauseBefore, Gates: o.Gates, Kube: o.Kube}
	if p.Name == "" {
		p.Name = strings.ToLower(o.From + "-to-" + o.To)
	}
	if p.Kube != nil {
		k := *p.Kube
		k.RolloutTimeout = signals.Duration(or(time.Duration(k.RolloutTimeout), DefaultRolloutTimeout))
		if err := k.Validate(); err != nil {
			return Plan{}, fmt.Errorf("%w: %v", ErrBadInput, err)
		}
		if err := kube.ValidLeaseName(p.Name); err != nil {
			return Plan{}, fmt.Errorf("%w: %v", ErrBadInput, err)
		}
		p.Kube = &k
	}
	if len(p.Gates) == 0 {
		p.Gates = DefaultGates()
	}
	p.Gates = slices.Clone(p.Gates)
	for i := range p.Gates {
		if err := p.Gates[i].Compile(); err != nil {
			return Plan{}, fmt.Errorf("%w: %v", ErrBadInput, err)
		}
	}
	shards, err := r.Shards(ctx, p.App)
	if err != nil {
		return Plan{}, err
	}
	pools := map[string]bool{}
	for _, s := range shards {
		pools[s.Pool] = true
		st := ShardState{ID: s.ID, State: s.State, Slot: s.Slot, Address: s.Address}
		switch s.Pool {
		case p.From:
			p.FromShards = append(p.FromShards, st)
		case p.To:
			p.ToShards = append(p.ToShards, st)
		}
	}
	known := strings.Join(slices.Sorted(maps.Keys(pools)), ", ")
	switch {
	case len(p.FromShards) == 0:
		return Plan{}, fmt.Errorf("%w: no shard in pool %q of %s (pools: %s)", ErrBadInput, p.From, p.App, known)
	case len(p.ToShards) == 0:
		return Plan{}, fmt.Errorf("%w: no shard in pool %q of %s (pools: %s)", ErrBadInput, p.To, p.App, known)
	case !slices.ContainsFunc(p.ToShards, func(s ShardState) bool { return takesCutover(s.State) }):
		return Plan{}, fmt.Errorf("%w: pool %s has no UP shard to move work to (%s)", ErrBadInput, p.To, describeShards(p.ToShards))
	}
	deps, err := r.Deployments(ctx)
	if err != nil {
		return Plan{}, err
	}
	p.Deployments = len(deps)
	p.Queries = map[string]string{}
	pl := p.pools()
	for i := range p.Gates {
		if p.Queries[p.Gates[i].Name], err = p.Gates[i].Resolve(pl); err != nil {
			return Plan{}, fmt.Errorf("%w: %v", ErrBadInput, err)
		}
	}
	p.Fingerprint = fingerprint(p)
	rec, err := r.Cutover(ctx, p.Name)
	switch {
	case registryclient.IsNotFound(err):
	case err != nil:
		return Plan{}, err
	}
	p.Changes = !(rec.Phase == registryapi.PhaseDone && rec.From == p.From && rec.To == p.To)
	p.Actions = p.actions(rec)
	return p, nil
}

func or(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

func describeShards(ss []ShardState) string {
	var parts []string
	for _, s := range ss {
		parts = append(parts, s.ID+" "+s.State)
	}
	return strings.Join(parts, ", ")
}

func (p Plan) pools() Pools {
	pl := Pools{FromName: p.From, ToName: p.To}
	for _, s := range p.FromShards {
		pl.From = append(pl.From, s.ID)
	}
	for _, s := range p.ToShards {
		pl.To = append(pl.To, s.ID)
	}
	return pl
}

// fingerprint hashes what the plan depends on: both pools' shards (id,
// state, slot, address) and the ledger's length.
func fingerprint(p Plan) string {
	b, _ := json.Marshal(struct {
		From, To    []ShardState
		Deployments int
	}{p.FromShards, p.ToShards, p.Deployments})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// Drift says how the registry moved on since plan was made ("" when it
// did not).
func Drift(plan, now Plan) string {
	if plan.Fingerprint == now.Fingerprint {
		return ""
	}
	var diffs []string
	index := func(ss []ShardState) map[string]ShardState {
		m := map[string]ShardState{}
		for _, s := range ss {
			m[s.ID] = s
		}
		return m
	}
	for _, pool := range []struct {
		name    string
		was, is []ShardState
	}{{plan.From, plan.FromShards, now.FromShards}, {plan.To, plan.ToShards, now.ToShards}} {
		was, is := index(pool.was), index(pool.is)
		for _, id := range slices.Sorted(maps.Keys(was)) {
			w, ok := is[id]
			switch {
			case !ok:
				diffs = append(diffs, fmt.Sprintf("%s left pool %s", id, pool.name))
			case w != was[id]:
				diffs = append(diffs, fmt.Sprintf("%s was %s (slot %d, %s), is %s (slot %d, %s)", id, was[id].State, was[id].Slot, was[id].Address, w.State, w.Slot, w.Address))
			}
		}
		for _, id := range slices.Sorted(maps.Keys(is)) {
			if _, ok := was[id]; !ok {
				diffs = append(diffs, fmt.Sprintf("%s joined pool %s", id, pool.name))
			}
		}
	}
	if plan.Deployments != now.Deployments {
		diffs = append(diffs, fmt.Sprintf("the ledger held %d deployments, holds %d", plan.Deployments, now.Deployments))
	}
	return strings.Join(diffs, "; ")
}

// actions say in words what applying the plan does.
func (p Plan) actions(rec registryapi.Cutover) []string {
	if !p.Changes {
		return []string{fmt.Sprintf("nothing: cutover %s from %s to %s is done", p.Name, p.From, p.To)}
	}
	var out []string
	if rec.Name != "" && !registryapi.Final(rec.Phase) {
		out = append(out, fmt.Sprintf("resume cutover %s at step %d of %d (%s)", p.Name, rec.Step+1, p.Total(), p.StepName(rec.Step)))
	}
	out = append(out, fmt.Sprintf("preflight: %s UP (or held OUT_OF_SERVICE until the first step) with a healthy topology and every one of the %d deployments replayed; its signals not warn or critical over %v; every gate answers",
		strings.Join(p.pools().To, ", "), p.Deployments, time.Duration(p.GateWindow)))
	if p.Kube != nil {
		out = append(out, p.Kube.Actions()...)
	}
	for j := 1; j <= len(p.Steps); j++ {
		w := p.weightsAt(j)
		what := fmt.Sprintf("set weights %s %d / %s %d, hold %v while the gates watch", p.From, w[p.From], p.To, w[p.To], time.Duration(p.StepPause))
		if j == len(p.Steps) && p.PauseBefore == PausePromote {
			what = "pause for cutover promote, then " + what
		}
		out = append(out, what)
	}
	drain := fmt.Sprintf("set %s DRAINING and wait until empty (at most %v), then OUT_OF_SERVICE", strings.Join(p.pools().From, ", "), time.Duration(p.DrainTimeout))
	if p.PauseBefore == PauseDrain {
		drain = "pause for cutover promote, then " + drain
	}
	return append(out, drain)
}

// ReadPlan reads a plan saved by `cutover plan --out`.
func ReadPlan(path string) (Plan, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Plan{}, fmt.Errorf("plan file: %w", err)
	}
	var p Plan
	if err := json.Unmarshal(b, &p); err != nil {
		return Plan{}, fmt.Errorf("plan file %s: %w", path, err)
	}
	if p.Name == "" || p.From == "" || p.To == "" || len(p.Steps) == 0 || p.Fingerprint == "" {
		return Plan{}, fmt.Errorf("plan file %s: not a plan (want the output of cutover plan --out)", path)
	}
	for i := range p.Gates {
		if err := p.Gates[i].Compile(); err != nil {
			return Plan{}, fmt.Errorf("plan file %s: %w", path, err)
		}
	}
	return p, nil
}

// Options are the plan's options, to make it again from the registry.
func (p Plan) Options() PlanOptions {
	return PlanOptions{Name: p.Name, App: p.App, From: p.From, To: p.To, Steps: p.Steps, StepPause: time.Duration(p.StepPause),
		GateWindow: time.Duration(p.GateWindow), DrainTimeout: time.Duration(p.DrainTimeout), PauseBefore: p.PauseBefore, Gates: p.Gates, Kube: p.Kube}
}

// Differences names, as the plan's JSON does, the options in which p and
// q differ: what a cutover in progress would not take from a new command.
func (p Plan) Differences(q Plan) []string {
	var out []string
	for _, o := range []struct {
		name string
		a, b any
	}{
		{"steps", p.Steps, q.Steps},
		{"stepPause", p.StepPause, q.StepPause},
		{"gateWindow", p.GateWindow, q.GateWindow},
		{"drainTimeout", p.DrainTimeout, q.DrainTimeout},
		{"pauseBefore", p.PauseBefore, q.PauseBefore},
		{"gates", p.Gates, q.Gates},
		{"kube", p.Kube == nil, q.Kube == nil},
	} {
		a, _ := json.Marshal(o.a)
		b, _ := json.Marshal(o.b)
		if string(a) != string(b) {
			out = append(out, o.name)
		}
	}
	if p.Kube != nil && q.Kube != nil {
		// Field by field, as the flags set them: kube.service, …
		var a, b map[string]any
		x, _ := json.Marshal(p.Kube)
		y, _ := json.Marshal(q.Kube)
		_ = json.Unmarshal(x, &a)
		_ = json.Unmarshal(y, &b)
		for _, k := range slices.Sorted(maps.Keys(a)) {
			if fmt.Sprint(a[k]) != fmt.Sprint(b[k]) {
				out = append(out, "kube."+k)
			}
		}
		for _, k := range slices.Sorted(maps.Keys(b)) {
			if _, ok := a[k]; !ok {
				out = append(out, "kube."+k)
			}
		}
	}
	return out
}

// Current is the cutover a command without a name means: the app's in
// progress, else the one written last.
func Current(ctx context.Context, r CutoverRegistry, app string) (registryapi.Cutover, error) {
	all, err := r.Cutovers(ctx, app)
	if err != nil {
		return registryapi.Cutover{}, err
	}
	var latest *registryapi.Cutover
	for i := range all {
		c := &all[i]
		if !registryapi.Final(c.Phase) {
			return *c, nil
		}
		if latest == nil || c.UpdatedAt.After(latest.UpdatedAt) {
			latest = c
		}
	}
	if latest == nil {
		return registryapi.Cutover{}, fmt.Errorf("%w: no cutover in %s: start one with cutover apply", registryapi.ErrNotFound, strings.ToUpper(app))
	}
	return *latest, nil
}

// admissionOf is how the proxies admit new instances to a shard, false
// when every one of them simply admits it: refused when one refuses it,
// else paced when one paces it, at the rate the pacing ones give it.
func admissionOf(h proxies.Health) (signals.Admission, bool) {
	a := signals.Admission{Of: h.Proxies, Reason: h.AdmissionReason()}
	switch h.AdmissionState() {
	case proxyapi.AdmissionRefused:
		a.State, a.Proxies = signals.AdmissionRefused, h.Refusing
	case proxyapi.AdmissionPaced:
		a.State, a.Proxies, a.RatePerSec = signals.AdmissionPaced, h.Paced, h.PacedRate
	default:
		return signals.Admission{}, false
	}
	return a, true
}

// takesCutover reports whether a target shard may take work in a
// cutover: UP, or registered OUT_OF_SERVICE (held out until the first
// weight step lets it in).
func takesCutover(state string) bool {
	return state == registryapi.StateUp || state == registryapi.StateOutOfService
}

// FederationOf reads the registry's side of the dashboard from its
// shards of app: pools, the weights of the last cutover, and the cutover
// in progress with what its draining shards still hold; with what the
// proxies see (views): which shards they hold DOWN, those among them the
// registry no longer lists, and how they admit new instances to each
// (those they pace or refuse, with why).
func FederationOf(ctx context.Context, r CutoverRegistry, app string, shards []registryapi.Shard, views []proxies.View) (*signals.Federation, error) {
	f := &signals.Federation{Pools: map[string]string{}}
	pools := map[string]string{} // by id: the registry's shards and those only the proxies know
	for _, s := range shards {
		pools[s.ID] = s.Pool
	}
	for _, s := range proxies.Unlisted(views, shards) {
		pools[s.ID] = s.Pool
	}
	for id, pool := range pools {
		if pool != "" {
			f.Pools[id] = pool
		}
		h := proxies.Of(views, id)
		if h.Down > 0 {
			if f.Down == nil {
				f.Down = map[string]string{}
			}
			f.Down[id] = id + " " + h.DownLine()
		}
		if h.Proxies > 0 {
			if f.Proxies == nil {
				f.Proxies = map[string]int{}
			}
			f.Proxies[id] = h.Proxies
		}
		if a, ok := admissionOf(h); ok {
			if f.Admission == nil {
				f.Admission = map[string]signals.Admission{}
			}
			f.Admission[id] = a
			lines := &f.Paced
			if a.State == signals.AdmissionRefused {
				lines = &f.Refused
			}
			if *lines == nil {
				*lines = map[string]string{}
			}
			(*lines)[id] = a.Line(id)
		}
	}
	all, err := r.Cutovers(ctx, app)
	if err != nil || len(all) == 0 {
		return f, err
	}
	rec, err := Current(ctx, r, app)
	if err != nil {
		return f, err
	}
	f.Weights = rec.Weights
	if registryapi.Final(rec.Phase) {
		return f, nil
	}
	plan, err := PlanOf(rec)
	if err != nil {
		return f, err
	}
	f.Cutover = fmt.Sprintf("%s %s, step %d of %d: %s", rec.Name, rec.Phase, min(rec.Step+1, plan.Total()), plan.Total(), plan.StepName(min(rec.Step, plan.Total()-1)))
	if rec.Message != "" {
		f.Cutover += " (" + rec.Message + ")"
	}
	for id, e := range ProgressOf(rec).Drain {
		if f.Draining == nil {
			f.Draining = map[string]string{}
		}
		f.Draining[id] = e.Line()
	}
	return f, nil
}
