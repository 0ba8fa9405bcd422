package migrate

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"
	"text/template"
	"time"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/vm"

	"github.com/shardctl/shardctl/internal/yamlfile"

	"github.com/shardctl/shardctl/internal/signals"
)

// A gate is a metric checked before and during a cutover's steps, as an
// Argo Rollouts analysis metric is: a query, conditions on its result,
// how often and how many times to measure, and how many failures or
// errors it tolerates. The query is PromQL (with --prometheus) or a
// field of the signals of a pool's shards (from either source).

// NoData policies: what a measurement that returns no value means.
const (
	NoDataFail         = "fail"
	NoDataInconclusive = "inconclusive"
	NoDataPass         = "pass"
)

// Gate is one metric of a gates file.
type Gate struct {
	Name string `json:"name"`
	// Query is PromQL; {{.From}} and {{.To}} are regular expressions of
	// the pools' shard ids (for cluster=~"{{.To}}"), {{.FromPool}} and
	// {{.ToPool}} their names.
	Query string `json:"query,omitempty"`
	// Signal is a field of the signals report (level, ratio,
	// completedPerSec, p99Seconds, queueSlopePerSec, dropShare, …) over
	// the shards of Pool: "to" (the default) or "from". level is 0 ok, 1
	// warn, 2 critical.
	Signal string `json:"signal,omitempty"`
	Pool   string `json:"pool,omitempty"`
	// Conditions on result, a list of the values the query returned
	// (result[0] is the first): met failureCondition fails a measurement,
	// unmet successCondition fails it, neither given passes it.
	SuccessCondition      string           `json:"successCondition,omitempty"`
	FailureCondition      string           `json:"failureCondition,omitempty"`
	Interval              signals.Duration `json:"interval,omitempty"`
	Count                 int              `json:"count,omitempty"`        // measurements per step; 0: every interval while the step holds
	FailureLimit          int              `json:"failureLimit,omitempty"` // failed measurements tolerated
	ConsecutiveErrorLimit int              `json:"consecutiveErrorLimit,omitempty"`
	NoData                string           `json:"noData,omitempty"` // fail (default), inconclusive or pass

	success, failure *vm.Program
	query            *template.Template
}

// Gate defaults.
const (
	DefaultGateInterval          = 10 * time.Second
	DefaultConsecutiveErrorLimit = 4
)

// GatesFile is the YAML (or JSON) a --gates file holds.
type GatesFile struct {
	Gates []Gate `json:"gates"`
}

// signalFields are the signals a gate may name, as the report's JSON
// names them.
var signalFields = map[string]func(signals.Signals) (float64, bool){
	"level":            func(s signals.Signals) (float64, bool) { return float64(s.Level), true },
	"createdPerSec":    func(s signals.Signals) (float64, bool) { return s.CreatedPerSec, true },
	"completedPerSec":  func(s signals.Signals) (float64, bool) { return s.CompletedPerSec, true },
	"ratio":            func(s signals.Signals) (float64, bool) { return deref(s.Ratio) },
	"queue":            func(s signals.Signals) (float64, bool) { return s.Queue, true },
	"queueSlopePerSec": func(s signals.Signals) (float64, bool) { return s.QueueSlope, true },
	"p50Seconds":       func(s signals.Signals) (float64, bool) { return deref(s.P50) },
	"p99Seconds":       func(s signals.Signals) (float64, bool) { return deref(s.P99) },
	"shareAtLeast1s":   func(s signals.Signals) (float64, bool) { return s.SlowShare, true },
	"dropShare":        func(s signals.Signals) (float64, bool) { return s.DropShare, true },
	"debtInstances":    func(s signals.Signals) (float64, bool) { return s.Debt, true },
}

func deref(v *float64) (float64, bool) {
	if v == nil {
		return 0, false
	}
	return *v, true
}

// DefaultGates watch the target pool's own signals: a cutover step fails
// when the shards it moved work to turn critical.
func DefaultGates() []Gate {
	return []Gate{{Name: "target-signals", Signal: "level", Pool: "to", FailureCondition: "result[0] >= 2",
		Interval: signals.Duration(DefaultGateInterval), NoData: NoDataFail}}
}

// LoadGates reads a gates file and checks every gate; a typo (an unknown
// field, a bad condition, a bad template) is an error naming the gate.
func LoadGates(path string) ([]Gate, error) {
	var f GatesFile
	if err := yamlfile.Read(path, &f); err != nil {
		return nil, fmt.Errorf("gates file: %w", err)
	}
	if len(f.Gates) == 0 {
		return nil, fmt.Errorf("gates file %s: no gates (want gates: [{name, query or signal, conditions}])", path)
	}
	for i := range f.Gates {
		if err := f.Gates[i].Compile(); err != nil {
			return nil, fmt.Errorf("gates file %s: %w", path, err)
		}
	}
	return f.Gates, nil
}

// Compile checks a gate and fills its defaults.
func (g *Gate) Compile() error {
	name := g.Name
	if name == "" {
		return errors.New("a gate without a name")
	}
	switch {
	case (g.Query == "") == (g.Signal == ""):
		return fmt.Errorf("gate %s: give query (PromQL) or signal (%s), one of them", name, strings.Join(signalNames(), ", "))
	case g.Signal != "" && signalFields[g.Signal] == nil:
		return fmt.Errorf("gate %s: unknown signal %q (want one of %s)", name, g.Signal, strings.Join(signalNames(), ", "))
	}
	if g.Pool == "" {
		g.Pool = "to"
	}
	if g.Pool != "to" && g.Pool != "from" {
		return fmt.Errorf("gate %s: pool %q: want to or from", name, g.Pool)
	}
	if g.NoData == "" {
		g.NoData = NoDataFail
	}
	if g.NoData != NoDataFail && g.NoData != NoDataInconclusive && g.NoData != NoDataPass {
		return fmt.Errorf("gate %s: noData %q: want fail, inconclusive or pass", name, g.NoData)
	}
	if g.Interval == 0 {
		g.Interval = signals.Duration(DefaultGateInterval)
	}
	if g.Interval < signals.Duration(time.Second) || g.Count < 0 || g.FailureLimit < 0 || g.ConsecutiveErrorLimit < 0 {
		return fmt.Errorf("gate %s: interval at least 1s; count, failureLimit and consecutiveErrorLimit not negative", name)
	}
	if g.ConsecutiveErrorLimit == 0 {
		g.ConsecutiveErrorLimit = DefaultConsecutiveErrorLimit
	}
	var err error
	env := expr.Env(map[string]any{"result": []float64{}})
	if g.SuccessCondition != "" {
		if g.success, err = expr.Compile(g.SuccessCondition, env, expr.AsBool()); err != nil {
			return fmt.Errorf("gate %s: successCondition %q: %s", name, g.SuccessCondition, firstLine(err))
		}
	}
	if g.FailureCondition != "" {
		if g.failure, err = expr.Compile(g.FailureCondition, env, expr.AsBool()); err != nil {
			return fmt.Errorf("gate %s: failureCondition %q: %s", name, g.FailureCondition, firstLine(err))
		}
	}
	if g.Query != "" {
		if g.query, err = template.New(name).Option("missingkey=error").Parse(g.Query); err != nil {
			return fmt.Errorf("gate %s: query: %w", name, err)
		}
	}
	return nil
}

// firstLine is an error's first line: expr draws a caret under the
// expression on the lines after it.
func firstLine(err error) string {
	line, _, _ := strings.Cut(err.Error(), "\n")
	return line
}

func signalNames() []string {
	out := make([]string, 0, len(signalFields))
	for k := range signalFields {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Pools are the shard ids of the two pools, for query templates.
type Pools struct {
	From, To         []string
	FromName, ToName string
}

// Resolve writes a gate's query with the pools filled in; a signal gate
// reads as "signal FIELD of POOL (shards)".
func (g *Gate) Resolve(p Pools) (string, error) {
	if g.Signal != "" {
		ids := p.To
		pool := p.ToName
		if g.Pool == "from" {
			ids, pool = p.From, p.FromName
		}
		return fmt.Sprintf("signal %s of pool %s (%s)", g.Signal, pool, strings.Join(ids, ", ")), nil
	}
	alt := func(ids []string) string {
		q := make([]string, len(ids))
		for i, id := range ids {
			q[i] = regexp.QuoteMeta(id)
		}
		return strings.Join(q, "|")
	}
	var b bytes.Buffer
	err := g.query.Execute(&b, map[string]string{"From": alt(p.From), "To": alt(p.To), "FromPool": p.FromName, "ToPool": p.ToName})
	if err != nil {
		return "", fmt.Errorf("gate %s: query: %w", g.Name, err)
	}
	return b.String(), nil
}

// Measurement outcomes.
const (
	Successful   = "Successful"
	Failed       = "Failed"
	Inconclusive = "Inconclusive"
	Errored      = "Error"
)

// Measurement is one evaluation of a gate.
type Measurement struct {
	Gate   string    `json:"gate"`
	At     time.Time `json:"at"`
	Query  string    `json:"query"` // resolved
	Result []float64 `json:"result"`
	Phase  string    `json:"phase"` // Successful, Failed, Inconclusive or Error
	// Message says why a measurement failed, errored or was inconclusive.
	Message string `json:"message,omitempty"`
}

// Judge turns a query's result (or its error) into a measurement.
func (g *Gate) Judge(query string, result []float64, err error, at time.Time) Measurement {
	m := Measurement{Gate: g.Name, At: at, Query: query, Result: result}
	if m.Result == nil {
		m.Result = []float64{}
	}
	switch {
	case err != nil:
		m.Phase, m.Message = Errored, err.Error()
		return m
	case len(result) == 0:
		switch g.NoData {
		case NoDataPass:
			m.Phase, m.Message = Successful, "no data (noData: pass)"
		case NoDataInconclusive:
			m.Phase, m.Message = Inconclusive, "no data (noData: inconclusive)"
		default:
			m.Phase, m.Message = Failed, "no data (noData: fail): the query returned no series"
		}
		return m
	}
	run := func(p *vm.Program) (bool, error) {
		out, err := expr.Run(p, map[string]any{"result": result})
		if err != nil {
			return false, err
		}
		v, _ := out.(bool)
		return v, nil
	}
	m.Phase = Successful
	if g.failure != nil {
		bad, err := run(g.failure)
		if err != nil {
			m.Phase, m.Message = Errored, fmt.Sprintf("failureCondition: %v", err)
			return m
		}
		if bad {
			m.Phase, m.Message = Failed, "failureCondition "+g.FailureCondition+" met"
			return m
		}
	}
	if g.success != nil {
		good, err := run(g.success)
		if err != nil {
			m.Phase, m.Message = Errored, fmt.Sprintf("successCondition: %v", err)
			return m
		}
		if !good {
			m.Phase, m.Message = Failed, "successCondition "+g.SuccessCondition+" not met"
			if g.failure != nil {
				m.Phase, m.Message = Inconclusive, "neither condition met"
			}
		}
	}
	return m
}

// tally follows one gate's measurements through a step, as Argo's
// analysis run does.
type tally struct {
	taken, failed, inconclusive, consecutiveErrors int
}

// add counts a measurement and says whether the gate has failed.
func (t *tally) add(g *Gate, m Measurement) (failed bool, why string) {
	t.taken++
	switch m.Phase {
	case Errored:
		t.consecutiveErrors++
		if t.consecutiveErrors > g.ConsecutiveErrorLimit {
			return true, fmt.Sprintf("gate %s: %d errors in a row (consecutiveErrorLimit %d): %s", g.Name, t.consecutiveErrors, g.ConsecutiveErrorLimit, m.Message)
		}
		return false, ""
	case Failed:
		t.failed++
	case Inconclusive:
		t.inconclusive++
	}
	t.consecutiveErrors = 0
	if t.failed > g.FailureLimit {
		return true, fmt.Sprintf("gate %s failed: %s = %s: %s", g.Name, m.Query, formatResult(m.Result), m.Message)
	}
	return false, ""
}

func formatResult(r []float64) string {
	if len(r) == 0 {
		return "no data"
	}
	parts := make([]string, len(r))
	for i, v := range r {
		if math.Abs(v) >= 1e4 || v == math.Trunc(v) {
			parts[i] = fmt.Sprintf("%.0f", v)
		} else {
			parts[i] = fmt.Sprintf("%.4g", v)
		}
	}
	return "[" + strings.Join(parts, ", ") + "]"
}
