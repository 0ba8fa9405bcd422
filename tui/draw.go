package tui

import (
	"math"
	"strings"
	"time"

	"github.com/shardctl/shardctl/internal/signals"
)

// Drawing: sparklines, strips and charts made of text. Every picture
// carries its meaning in glyphs too, so it reads without colour.

var blocks = []rune("▁▂▃▄▅▆▇█")

// resample averages a series into n columns over [from, to]; columns
// without a point are NaN.
func resample(s signals.Series, from, to time.Time, n int) []float64 {
	out := make([]float64, n)
	cnt := make([]int, n)
	span := to.Sub(from)
	if n <= 0 || span <= 0 {
		return out
	}
	for _, p := range s {
		if p.T.Before(from) || p.T.After(to) {
			continue
		}
		i := int(float64(p.T.Sub(from)) / float64(span) * float64(n))
		i = min(max(i, 0), n-1)
		out[i] += p.V
		cnt[i]++
	}
	for i := range out {
		if cnt[i] == 0 {
			out[i] = math.NaN()
		} else {
			out[i] /= float64(cnt[i])
		}
	}
	return out
}

func maxOf(vs ...[]float64) float64 {
	m := 0.0
	for _, v := range vs {
		for _, x := range v {
			if !math.IsNaN(x) && x > m {
				m = x
			}
		}
	}
	return m
}

// level maps v in [0, top] to 0..steps-1.
func level(v, top float64, steps int) int {
	if top <= 0 || math.IsNaN(v) {
		return 0
	}
	return min(max(int(v/top*float64(steps-1)+0.5), 0), steps-1)
}

// sparkline draws values as eighth blocks against top (0: their own
// maximum); missing values are blank.
func sparkline(vs []float64, top float64) string {
	if top <= 0 {
		top = maxOf(vs)
	}
	var b strings.Builder
	for _, v := range vs {
		if math.IsNaN(v) {
			b.WriteRune(' ')
			continue
		}
		b.WriteRune(blocks[level(v, top, len(blocks))])
	}
	return b.String()
}

// gap classes of a scissors column.
const (
	gapNone = iota
	gapPlan // completion under the plan ratio of creation
	gapAct  // under the act ratio
)

// scissorsStrip is the overview's scissors in one row: the height is the
// creation rate; a column where completion falls behind is shaded, ░
// under th.PlanRatio and ▓ under th.ActRatio, so the gap reads without
// colour.
func scissorsStrip(created, completed []float64, th signals.Thresholds, top float64) ([]rune, []int) {
	if top <= 0 {
		top = maxOf(created, completed)
	}
	glyphs := make([]rune, len(created))
	gaps := make([]int, len(created))
	for i := range created {
		c, d := created[i], completed[i]
		switch {
		case math.IsNaN(c):
			glyphs[i] = ' '
			continue
		case c >= th.MinRate && !math.IsNaN(d) && d < th.ActRatio*c:
			glyphs[i], gaps[i] = '▓', gapAct
		case c >= th.MinRate && !math.IsNaN(d) && d < th.PlanRatio*c:
			glyphs[i], gaps[i] = '░', gapPlan
		default:
			glyphs[i] = blocks[level(c, top, len(blocks))]
		}
	}
	return glyphs, gaps
}

// heatColumns is the overview's heatmap in one row: per column, the
// height of the bucket that holds the 99th percentile (so mass moving to
// seconds climbs), and its latency class for colour.
func heatColumns(h signals.Heatmap, from, to time.Time, n int) ([]rune, []float64) {
	glyphs := []rune(strings.Repeat(" ", n))
	p99s := make([]float64, n)
	for i := range p99s {
		p99s[i] = math.NaN()
	}
	if len(h.Bounds) == 0 || n == 0 {
		return glyphs, p99s
	}
	sums := make([][]float64, n)
	span := to.Sub(from)
	for ti, t := range h.Times {
		if t.Before(from) || t.After(to) || span <= 0 {
			continue
		}
		col := min(max(int(float64(t.Sub(from))/float64(span)*float64(n)), 0), n-1)
		if sums[col] == nil {
			sums[col] = make([]float64, len(h.Bounds))
		}
		for b, c := range h.Counts[ti] {
			sums[col][b] += c
		}
	}
	for col, counts := range sums {
		if counts == nil {
			continue
		}
		q := signals.Quantile(0.99, h.Bounds, counts)
		if math.IsNaN(q) {
			glyphs[col] = '·'
			continue
		}
		p99s[col] = q
		glyphs[col] = blocks[level(float64(bucketIndex(h.Bounds, q)), float64(len(h.Bounds)-1), len(blocks))]
	}
	return glyphs, p99s
}

func bucketIndex(bounds []float64, v float64) int {
	for i, b := range bounds {
		if v <= b {
			return i
		}
	}
	return len(bounds) - 1
}

// chart is a plot of one or two series on a grid of w×h cells with the
// gap between them shaded: the detail view's scissors and queue.
type chart struct {
	w, h int
	top  float64
	grid [][]rune
	kind [][]int // what each cell shows, for colour
}

const (
	cellEmpty = iota
	cellLineA // created, or the queue
	cellLineB // completed
	cellGap   // completion behind creation
	cellBar
)

func newChart(w, h int, top float64) *chart {
	c := &chart{w: w, h: h, top: top}
	for range h {
		c.grid = append(c.grid, []rune(strings.Repeat(" ", w)))
		c.kind = append(c.kind, make([]int, w))
	}
	return c
}

func (c *chart) row(v float64) int {
	return c.h - 1 - level(v, c.top, c.h)
}

// lines draws a (●) and b (○) with the cells between shaded (░) where b
// is below a.
func (c *chart) lines(a, b []float64) {
	for x := 0; x < c.w && x < len(a); x++ {
		if math.IsNaN(a[x]) {
			continue
		}
		ya := c.row(a[x])
		if x < len(b) && !math.IsNaN(b[x]) {
			yb := c.row(b[x])
			for y := ya + 1; y < yb; y++ {
				c.grid[y][x], c.kind[y][x] = '░', cellGap
			}
			c.grid[yb][x], c.kind[yb][x] = '○', cellLineB
		}
		c.grid[ya][x], c.kind[ya][x] = '●', cellLineA
	}
}

// bars fills each column from the bottom up to its value.
func (c *chart) bars(vs []float64) {
	for x := 0; x < c.w && x < len(vs); x++ {
		if math.IsNaN(vs[x]) {
			continue
		}
		for y := c.row(vs[x]); y < c.h; y++ {
			c.grid[y][x], c.kind[y][x] = '█', cellBar
		}
	}
}

// shades of a heatmap cell by its share of the busiest cell.
var shades = []rune(" ·░▒▓█")

// heatGrid is the detail view's heatmap: rows are buckets (slowest on
// top), columns are time, the glyph is the count.
func heatGrid(h signals.Heatmap, from, to time.Time, w int) ([][]rune, [][]float64) {
	rows := len(h.Bounds)
	grid := make([][]rune, rows)
	vals := make([][]float64, rows)
	for r := range grid {
		grid[r] = []rune(strings.Repeat(" ", w))
		vals[r] = make([]float64, w)
	}
	span := to.Sub(from)
	if w == 0 || span <= 0 {
		return grid, vals
	}
	for ti, t := range h.Times {
		if t.Before(from) || t.After(to) {
			continue
		}
		col := min(max(int(float64(t.Sub(from))/float64(span)*float64(w)), 0), w-1)
		for b, c := range h.Counts[ti] {
			vals[rows-1-b][col] += c
		}
	}
	top := maxOf(vals...)
	for r := range vals {
		for col, v := range vals[r] {
			if v > 0 {
				grid[r][col] = shades[max(1, level(v, top, len(shades)))]
			}
		}
	}
	return grid, vals
}

// bound names a bucket's upper bound: 10ms, 1s, +Inf.
func bound(b float64) string {
	if math.IsInf(b, 1) {
		return "+Inf"
	}
	return (time.Duration(b * float64(time.Second))).String()
}
