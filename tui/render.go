package tui

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"charm.land/lipgloss/v2"

	"github.com/charmbracelet/x/ansi"

	"github.com/shardctl/shardctl/internal/human"
	"github.com/shardctl/shardctl/internal/signals"
)

var (
	styleBold   = lipgloss.NewStyle().Bold(true)
	styleFaint  = lipgloss.NewStyle().Faint(true)
	styleOK     = lipgloss.NewStyle().Foreground(lipgloss.Green)
	styleWarn   = lipgloss.NewStyle().Foreground(lipgloss.Yellow)
	styleCrit   = lipgloss.NewStyle().Foreground(lipgloss.Red).Bold(true)
	styleSel    = lipgloss.NewStyle().Reverse(true)
	styleLineA  = lipgloss.NewStyle().Foreground(lipgloss.Cyan)
	styleLineB  = lipgloss.NewStyle().Foreground(lipgloss.Magenta)
	styleHeader = lipgloss.NewStyle().Bold(true).Underline(true)
)

// levelTag is the level as a symbol and a word, coloured. A shard whose
// metrics stopped is stale: never drawn as ok.
func levelTag(l signals.Level) string {
	switch l {
	case signals.Critical:
		return styleCrit.Render("✖ crit")
	case signals.Warn:
		return styleWarn.Render("▲ warn")
	case signals.Unknown:
		return styleWarn.Render("? stale")
	}
	return styleOK.Render("✔ ok")
}

func levelStyle(l signals.Level) lipgloss.Style {
	switch l {
	case signals.Critical:
		return styleCrit
	case signals.Warn, signals.Unknown:
		return styleWarn
	}
	return styleOK
}

// severity orders levels for the level sort: a shard nobody can read is
// more urgent than one that warns.
func severity(l signals.Level) float64 {
	if l == signals.Unknown {
		return float64(signals.Critical) - 0.5
	}
	return float64(l)
}

// known writes v with format, or None for a shard whose numbers are not
// its numbers now.
func known(s signals.Signals, text string) string {
	if s.Level == signals.Unknown {
		return human.None
	}
	return text
}

// row is one shard as the overview lists it.
type row struct {
	sig    signals.Signals
	series signals.Shard
}

// rows are the shards after the filter, in the sort order.
func (m *Model) rows() []row {
	if m.snap == nil {
		return nil
	}
	series := map[string]signals.Shard{}
	for _, s := range m.snap.Series {
		series[s.Name] = s
	}
	f := strings.ToLower(m.filter.Value())
	var out []row
	for _, s := range m.snap.Report.Shards {
		if f == "" || strings.Contains(strings.ToLower(s.Name), f) {
			out = append(out, row{s, series[s.Name]})
		}
	}
	ratio := func(s signals.Signals) float64 {
		if s.Ratio == nil {
			return math.Inf(1)
		}
		return *s.Ratio
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i].sig, out[j].sig
		switch m.sort {
		case byLevel:
			if a.Level != b.Level {
				return severity(a.Level) > severity(b.Level)
			}
		case byRatio:
			if ratio(a) != ratio(b) {
				return ratio(a) < ratio(b)
			}
		case byQueue:
			if a.Queue != b.Queue {
				return a.Queue > b.Queue
			}
		}
		return a.Name < b.Name
	})
	return out
}

// pad cuts or pads s (which may hold ANSI codes) to exactly w cells.
func pad(s string, w int) string {
	if w <= 0 {
		return ""
	}
	if lipgloss.Width(s) > w {
		s = lipgloss.NewStyle().MaxWidth(w).Render(s)
	}
	return s + strings.Repeat(" ", max(0, w-lipgloss.Width(s)))
}

// trend is the queue's direction as an arrow: ↗ growing as a line.
func trend(s signals.Signals) string {
	switch {
	case s.QueueGrowing:
		return styleCrit.Render("↗")
	case s.QueueSlope < -1:
		return "↘"
	}
	return "→"
}

// columns of the overview at a width: fixed ones and the pictures.
type columns struct {
	name, scissors, queue, heat, reason int
}

// Widths of the overview's fixed columns.
const (
	wState = 5
	wLevel = 7
	wRate  = 10 // DONE/NEW/S: two rates of at most 4 characters
	wRatio = 5
	wRef   = 4
	wAdmit = 6
	wQueue = 7
	wP99   = 6
	fixed  = wState + wLevel + wRate + wRatio + wRef + wAdmit + wQueue + wP99
)

// layout shares a width out: the fixed columns, then the pictures and,
// from 120 up, the reason. Under 20 cells for the three strips the queue's
// strip goes (its number and arrow stay): the scissors and the heatmap
// keep the room.
func layout(width int) columns {
	c := columns{name: 10}
	cells := 12 // name, the fixed, three strips: a space between each
	if width >= 120 {
		c.name = 14
		cells++
	}
	rest := width - c.name - fixed - (cells - 1)
	if width >= 120 {
		c.reason = rest * 35 / 100
		rest -= c.reason
	}
	if rest < 20 {
		rest = max(rest+1, 8) // and the space before the queue's strip
		c.scissors = rest / 2
		c.heat = rest - c.scissors
		return c
	}
	c.scissors = rest * 45 / 100
	c.queue = rest * 25 / 100
	c.heat = rest - c.scissors - c.queue
	return c
}

func (m *Model) window() (time.Time, time.Time) {
	to := m.opts.Now()
	if m.snap != nil {
		to = m.snap.Report.At
	}
	w := m.opts.Window
	if w <= 0 {
		w = 10 * time.Minute
	}
	return to.Add(-w), to
}

// scales are the tops the overview's strips share, so that shards compare
// at a glance: a quiet shard draws low, not full height.
type scales struct{ rate, queue float64 }

func (m *Model) scales() scales {
	var sc scales
	for _, s := range m.snap.Series {
		sc.rate = max(sc.rate, maxOf(s.Created.Values(), s.Completed.Values()))
		sc.queue = max(sc.queue, maxOf(s.Queue.Values()))
	}
	return sc
}

// pictures draws a shard's scissors, queue and heatmap strips.
func (m *Model) pictures(s signals.Shard, c columns, sc scales) (string, string, string) {
	from, to := m.window()
	created := resample(s.Created, from, to, c.scissors)
	completed := resample(s.Completed, from, to, c.scissors)
	th := m.snap.Thresholds
	glyphs, gaps := scissorsStrip(created, completed, th, sc.rate)
	var strip strings.Builder
	for i, g := range glyphs {
		switch gaps[i] {
		case gapAct:
			strip.WriteString(styleCrit.Render(string(g)))
		case gapPlan:
			strip.WriteString(styleWarn.Render(string(g)))
		default:
			strip.WriteString(styleLineA.Render(string(g)))
		}
	}
	q := ""
	if c.queue > 0 {
		q = sparkline(resample(s.Queue, from, to, c.queue), sc.queue)
	}
	hg, p99s := heatColumns(s.Latency, from, to, c.heat)
	var ht strings.Builder
	for i, g := range hg {
		st := styleOK
		switch {
		case math.IsNaN(p99s[i]):
			st = styleFaint
		case p99s[i] > th.P99:
			st = styleCrit
		case p99s[i] > th.P99Warn:
			st = styleWarn
		}
		ht.WriteString(st.Render(string(g)))
	}
	return strip.String(), q, ht.String()
}

func (m *Model) shardLine(r row, c columns, sc scales, selected bool) string {
	s := r.sig
	strip, q, ht := m.pictures(r.series, c, sc)
	name := pad(s.Name, c.name)
	if selected {
		name = styleSel.Render(name)
	}
	cells := []string{
		name,
		pad(m.state(s.Name), wState),
		pad(levelTag(s.Level), wLevel),
		pad(known(s, human.Rate(s.CompletedPerSec)+"/"+human.Rate(s.CreatedPerSec)), wRate),
		pad(known(s, human.Or(s.Ratio, human.Percent)), wRatio),
		pad(m.refused(s.Name), wRef),
		pad(m.admit(s.Name), wAdmit),
		pad(strip, c.scissors),
		pad(known(s, trend(s)+human.Count(s.Queue)), wQueue),
	}
	if c.queue > 0 {
		cells = append(cells, pad(q, c.queue))
	}
	cells = append(cells,
		pad(known(s, human.Or(s.P99, human.Latency)), wP99),
		pad(ht, c.heat),
	)
	if c.reason > 0 {
		reason := "-"
		if reasons := m.reasons(s); len(reasons) > 0 {
			reason = reasons[0]
		}
		cells = append(cells, pad(levelStyle(s.Level).Render(reason), c.reason))
	}
	return strings.Join(cells, " ")
}

// refused is the part of the new instances sent to a shard that it
// refused (as the proxies saw it), in the warning colour while a proxy
// gives it none for its backlog; "-" without the proxies' metrics.
func (m *Model) refused(name string) string {
	f := m.snap.Federation
	if f == nil {
		return human.None
	}
	if f.Refused[name] != "" {
		// The proxy places nothing there: what the shard refuses is not
		// what the federation refuses for it.
		return styleWarn.Render("off")
	}
	if f.Refusals == nil {
		return human.None
	}
	share, ok := f.Refusals.Shards[name]
	switch {
	case !ok:
		return human.None
	case share >= m.snap.Thresholds.DropShare:
		return styleWarn.Render(human.Percent(share))
	}
	return human.Percent(share)
}

// admit is how the proxies admit new instances to a shard: open, paced
// to a rate between them (≤40/s), or off (refused), the last two in the
// warning colour; "-" when no proxy spoke of it.
func (m *Model) admit(name string) string {
	f := m.snap.Federation
	if f == nil {
		return human.None
	}
	if a, ok := f.Admission[name]; ok {
		return styleWarn.Render(admitCell(a))
	}
	if f.Proxies[name] > 0 {
		return "open"
	}
	return human.None
}

// admitCell is a paced or refused admission in the ADMIT column's width:
// off, ≤40/s, ≤1.2k (no room for the unit), or paced while no rate is
// known.
func admitCell(a signals.Admission) string {
	switch {
	case a.State == signals.AdmissionRefused:
		return "off"
	case a.RatePerSec <= 0:
		return "paced"
	}
	cell := "≤" + signals.AdmitRate(a.RatePerSec)
	if lipgloss.Width(cell+"/s") <= wAdmit {
		cell += "/s"
	}
	return cell
}

// state is a shard's state in the registry, short: UP, DRAIN, OOS, DOWN.
func (m *Model) state(name string) string {
	st, ok := m.snap.States[name]
	if !ok {
		return "-"
	}
	switch st {
	case "DRAINING":
		return styleWarn.Render("DRAIN")
	case "OUT_OF_SERVICE":
		return styleWarn.Render("OOS")
	case "DOWN":
		return styleCrit.Render("DOWN")
	case "STARTING":
		return "START"
	}
	return st
}

func (m *Model) header() string {
	title := styleBold.Render("shardctl top")
	src := m.opts.Source
	lvl := ""
	if m.snap != nil {
		lvl = levelTag(m.snap.Report.Level)
	}
	left := fmt.Sprintf("%s · %s · window %v · every %v", title, src, m.opts.Window, m.opts.Refresh)
	if m.snap != nil && len(m.snap.Report.Unknown) > 0 {
		lvl = styleWarn.Render(fmt.Sprintf("? %d stale", len(m.snap.Report.Unknown))) + " " + lvl
	}
	return pad(left, m.width-lipgloss.Width(lvl)-1) + " " + lvl
}

func (m *Model) renderOverview() string {
	var b strings.Builder
	b.WriteString(m.header() + "\n")
	if m.snap == nil {
		if m.err != nil {
			b.WriteString("\n" + styleCrit.Render("no data yet: "+m.err.Error()) + "\n")
		} else {
			b.WriteString("\nwaiting for the first snapshot…\n")
		}
		return b.String()
	}
	all := m.snap.Report.Overall
	debt := ""
	if all.Debt >= 1 && all.Level > signals.OK || all.Recovery != nil && all.Queue > m.snap.Thresholds.QueueEmpty {
		switch {
		case all.Recovery != nil:
			debt = fmt.Sprintf("  debt %s, caught up in %s", human.Count(all.Debt), all.Recovery.When())
		default:
			debt = fmt.Sprintf("  debt %s, not recovering", human.Count(all.Debt))
		}
	}
	drops := ""
	if all.DropShare > 0 {
		drops = "  drops " + human.Percent(all.DropShare)
	}
	b.WriteString(fmt.Sprintf("all  created %s/s  completed %s/s (%s)  queue %s%s  p99 %s%s%s\n",
		human.Rate(all.CreatedPerSec), human.Rate(all.CompletedPerSec), human.Or(all.Ratio, human.Percent), trend(all), human.Count(all.Queue),
		human.Or(all.P99, human.Latency), drops, debt))
	if line := m.refusedAll(); line != "" {
		b.WriteString(line + "\n")
	}
	fed := federationLines(m.snap.Federation)
	for _, line := range fed {
		b.WriteString(pad(line, m.width) + "\n")
	}
	c := layout(m.width)
	head := []string{pad("SHARD", c.name), pad("STATE", wState), pad("LEVEL", wLevel), pad("DONE/NEW/S", wRate), pad("RATIO", wRatio),
		pad("REF", wRef), pad("ADMIT", wAdmit), pad("SCISSORS ▓░ gap", c.scissors), pad("QUEUE", wQueue)}
	if c.queue > 0 {
		head = append(head, pad("TREND", c.queue))
	}
	head = append(head, pad("P99", wP99), pad("HEATMAP p99", c.heat))
	if c.reason > 0 {
		head = append(head, pad("REASON", c.reason))
	}
	b.WriteString(styleHeader.Render(strings.Join(head, " ")) + "\n")
	rows := m.rows()
	if len(rows) == 0 {
		b.WriteString(styleFaint.Render("no shard matches the filter") + "\n")
	}
	m.selected = min(m.selected, max(len(rows)-1, 0))
	// Keep the selected row in view.
	room := max(m.height-6-len(fed), 1)
	if m.refusedAll() != "" {
		room = max(room-1, 1)
	}
	first := max(0, m.selected-room+1)
	sc := m.scales()
	for i := first; i < len(rows) && i < first+room; i++ {
		b.WriteString(m.shardLine(rows[i], c, sc, i == m.selected) + "\n")
	}
	if m.filtering || m.filter.Value() != "" {
		b.WriteString(m.filter.View() + "\n")
	}
	return b.String()
}

// refusedAll says what the proxies refused their clients: the explicit
// backpressure of the federation, beside the shards' own.
func (m *Model) refusedAll() string {
	f := m.snap.Federation
	if f == nil || f.Refusals == nil || f.Refusals.AskedPerSec == 0 {
		return ""
	}
	r := f.Refusals
	text := fmt.Sprintf("proxy refused %s of new instances (%s/s of %s/s)", human.Percent(r.Share), human.Rate(r.PerSec), human.Rate(r.AskedPerSec))
	if r.Share >= m.snap.Thresholds.DropShare {
		return styleWarn.Render(text)
	}
	return text
}

func (m *Model) renderDetail() string {
	rows := m.rows()
	if len(rows) == 0 {
		return m.renderOverview()
	}
	r := rows[min(m.selected, len(rows)-1)]
	s := r.sig
	from, to := m.window()
	var b strings.Builder
	b.WriteString(m.header() + "\n")
	if s.Level == signals.Unknown {
		b.WriteString(fmt.Sprintf("%s  %s  state %s\n", styleBold.Render(s.Name), levelTag(s.Level), m.state(s.Name)))
	} else {
		b.WriteString(fmt.Sprintf("%s  %s  created %s/s  completed %s/s (%s)  queue %s %+.1f/s (R² %.2f)  p50 %s  p99 %s  ≥"+human.Latency(signals.SlowLatency)+" %s  drops %s  refused %s\n",
			styleBold.Render(s.Name), levelTag(s.Level), human.Rate(s.CreatedPerSec), human.Rate(s.CompletedPerSec), human.Or(s.Ratio, human.Percent),
			human.Count(s.Queue), s.QueueSlope, s.QueueR2, human.Or(s.P50, human.Latency), human.Or(s.P99, human.Latency), human.Percent(s.SlowShare),
			human.Percent(s.DropShare), m.refused(s.Name)))
	}
	// The DOWN line, then how the proxies admit new instances (wrapped,
	// in the warning colour, once: the snapshot's reasons may carry it
	// too, from NoteAdmission), then the level's reasons.
	reasons := m.reasons(s)
	admission := m.admissionLines(s.Name)
	first := 0
	if f := m.snap.Federation; f != nil && len(reasons) > 0 && f.Down[s.Name] != "" && reasons[0] == f.Down[s.Name] {
		first = 1
	}
	var lines []string
	for _, reason := range reasons[:first] {
		lines = append(lines, levelStyle(s.Level).Render("  • "+reason))
	}
	for _, l := range admission {
		lines = append(lines, styleWarn.Render(l))
	}
	for _, reason := range reasons[first:] {
		lines = append(lines, levelStyle(s.Level).Render("  • "+reason))
	}
	for _, l := range lines {
		b.WriteString(l + "\n")
	}
	const axis = 8
	w := max(m.width-axis-1, 10)
	used := 2 + len(lines) + 1
	left := max(m.height-used-6, 9)
	hScissors := max(left*35/100, 3)
	hQueue := max(left*25/100, 3)
	created := resample(r.series.Created, from, to, w)
	completed := resample(r.series.Completed, from, to, w)
	sc := newChart(w, hScissors, maxOf(created, completed))
	sc.lines(created, completed)
	b.WriteString(styleBold.Render("scissors") + "  " + styleLineA.Render("● created/s") + "  " + styleLineB.Render("○ completed/s") + "  ░ gap\n")
	b.WriteString(plot(sc, axis))
	queue := resample(r.series.Queue, from, to, w)
	qc := newChart(w, hQueue, maxOf(queue))
	qc.bars(queue)
	b.WriteString(styleBold.Render("queue") + "  records not processed " + trend(s) + "\n")
	b.WriteString(plot(qc, axis))
	grid, _ := heatGrid(r.series.Latency, from, to, w)
	b.WriteString(styleBold.Render("heatmap") + "  latency by bucket over time  ·░▒▓█ more\n")
	bounds := r.series.Latency.Bounds
	for i, line := range grid {
		label := bound(bounds[len(bounds)-1-i])
		b.WriteString(pad("≤"+label, axis) + " " + string(line) + "\n")
	}
	b.WriteString(pad("", axis) + " " + timeAxis(from, to, w) + "\n")
	return b.String()
}

// reasons are a shard's reasons but for the proxies' admission line
// (NoteAdmission puts it there for signals' table): ADMIT, the lines
// above the table and the detail view's own line say it.
func (m *Model) reasons(s signals.Signals) []string {
	f := m.snap.Federation
	if f == nil || s.Admission == nil {
		return s.Reasons
	}
	a, ok := f.Admission[s.Name]
	if !ok {
		return s.Reasons
	}
	line := a.Line(s.Name)
	return slices.DeleteFunc(slices.Clone(s.Reasons), func(r string) bool { return r == line })
}

// admissionLines say, in the detail view, how the proxies admit new
// instances to a shard they pace or refuse, wrapped to the width: none
// when they all admit it or none spoke of it.
func (m *Model) admissionLines(name string) []string {
	f := m.snap.Federation
	if f == nil {
		return nil
	}
	a, ok := f.Admission[name]
	if !ok {
		return nil
	}
	text := ansi.Wordwrap(a.Line(name), max(m.width-5, 20), "")
	lines := strings.Split(text, "\n")
	for i := range lines {
		lead := "    "
		if i == 0 {
			lead = "  • "
		}
		lines[i] = lead + lines[i]
	}
	return lines
}

// plot writes a chart with its y axis labels (top value and zero).
func plot(c *chart, axis int) string {
	var b strings.Builder
	for y := range c.grid {
		label := ""
		switch y {
		case 0:
			label = human.Rate(c.top)
		case c.h - 1:
			label = "0"
		}
		b.WriteString(pad(label, axis) + " ")
		for x, g := range c.grid[y] {
			switch c.kind[y][x] {
			case cellLineA, cellBar:
				b.WriteString(styleLineA.Render(string(g)))
			case cellLineB:
				b.WriteString(styleLineB.Render(string(g)))
			case cellGap:
				b.WriteString(styleWarn.Render(string(g)))
			default:
				b.WriteRune(g)
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

// timeAxis labels the x axis: the window's start and now.
func timeAxis(from, to time.Time, w int) string {
	left := "-" + to.Sub(from).Round(time.Second).String()
	right := "now"
	return left + strings.Repeat(" ", max(w-len(left)-len(right), 1)) + right
}

func (m *Model) renderHelp() string {
	var b strings.Builder
	b.WriteString(m.header() + "\n\n")
	b.WriteString(styleBold.Render("keys") + "\n")
	b.WriteString(m.help.FullHelpView(keys.FullHelp()) + "\n\n")
	b.WriteString(styleBold.Render("pictures") + "\n")
	th := signals.DefaultThresholds()
	if m.snap != nil {
		th = m.snap.Thresholds
	}
	fmt.Fprintf(&b, `  scissors  height: instances created/s; ░ completion under %s of creation,
            ▓ under %s (the gap between created and completed)
  queue     records appended but not processed; ↗ growing as a line,
            → level, ↘ falling
  heatmap   per column, the latency bucket holding p99 (higher = slower);
            p99 over %s in the warning colour, over %s critical; · no work
  REF       the part of new instances sent to a shard that it refused, as
            the proxies saw it; off: a proxy gives it none (see ADMIT)
  ADMIT     how the proxies admit new instances to it: open; ≤40/s paced
            to that rate between them (its queue is over their target);
            off: refused (its backlog, or its instance limit)
  levels    ✔ ok · ▲ warn: plan federation · ✖ crit: act now · ? stale:
            no metrics lately, its numbers unknown
`, human.Percent(th.PlanRatio), human.Percent(th.ActRatio), human.Latency(th.P99Warn), human.Latency(th.P99))
	b.WriteString(wrapIndented("critical when "+th.Critical()+"; warn when "+th.Warn()+".", 12, m.width))
	return b.String()
}

func (m *Model) statusLine() string {
	var parts []string
	switch {
	case m.paused:
		parts = append(parts, styleWarn.Render("⏸ paused"))
	case m.fetching:
		parts = append(parts, "⟳ fetching")
	}
	if !m.lastOK.IsZero() {
		parts = append(parts, fmt.Sprintf("updated %v ago", m.opts.Now().Sub(m.lastOK).Round(time.Second)))
	}
	if m.err != nil {
		parts = append(parts, styleCrit.Render(fmt.Sprintf("✖ %v (retry %d)", m.err, m.failures)))
	}
	parts = append(parts, "sort: "+m.sort.String())
	if m.blurred {
		parts = append(parts, "slow: unfocused")
	}
	parts = append(parts, styleFaint.Render("? help · q quit"))
	return pad(strings.Join(parts, " · "), m.width)
}

// wrapIndented wraps text to width, every line indented by indent spaces.
func wrapIndented(text string, indent, width int) string {
	pad := strings.Repeat(" ", indent)
	var b strings.Builder
	for _, line := range strings.Split(ansi.Wordwrap(text, max(width-indent-1, 20), ""), "\n") {
		b.WriteString(pad + line + "\n")
	}
	return b.String()
}

// federationLines say what the registry and the proxies say beside the
// signals: the shards the proxies hold DOWN, refuse and pace, a cutover
// in progress, the pools with their weights and shards, and what draining
// shards still hold.
func federationLines(f *signals.Federation) []string {
	if f == nil || (len(f.Pools) == 0 && f.Cutover == "" && len(f.Down) == 0 && len(f.Refused) == 0 && len(f.Paced) == 0) {
		return nil
	}
	var out []string
	for _, shard := range slices.Sorted(maps.Keys(f.Down)) {
		out = append(out, styleCrit.Render(f.Down[shard]))
	}
	for _, shard := range slices.Sorted(maps.Keys(f.Refused)) {
		out = append(out, styleWarn.Render(f.Refused[shard]))
	}
	for _, shard := range slices.Sorted(maps.Keys(f.Paced)) {
		out = append(out, styleWarn.Render(f.Paced[shard]))
	}
	if f.Cutover != "" {
		out = append(out, styleWarn.Render("cutover "+f.Cutover))
	}
	members := map[string][]string{}
	for shard, pool := range f.Pools {
		members[pool] = append(members[pool], shard)
	}
	var pools []string
	for _, pool := range slices.Sorted(maps.Keys(members)) {
		slices.Sort(members[pool])
		share := ""
		if f.Weights != nil {
			share = fmt.Sprintf(" %d%%", f.Weights[pool])
		}
		pools = append(pools, fmt.Sprintf("%s%s (%s)", pool, share, strings.Join(members[pool], ", ")))
	}
	if len(pools) > 0 {
		label := "pools  "
		if f.Weights != nil {
			label = "weights  "
		}
		out = append(out, label+strings.Join(pools, " · "))
	}
	for _, shard := range slices.Sorted(maps.Keys(f.Draining)) {
		out = append(out, styleFaint.Render("  "+f.Draining[shard]))
	}
	return out
}
