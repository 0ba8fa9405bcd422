// Package signals reads the degradation of a Zeebe cluster from three
// pictures rather than single numbers: the scissors (instances created
// against completed per second), the queue (records not yet processed) and
// the latency heatmap; it turns them into a level (ok, warn, critical) and
// the reason in words. It is pure arithmetic over series that a Source
// (internal/source) fetched, so what `shardctl top` draws and what
// `shardctl signals` decides are the same numbers.
// It is the model every room shares: it imports nothing of this module but
// internal/human (internal/architecture checks).
package signals

import (
	"math"
	"time"
)

// Point is one sample of a series.
type Point struct {
	T time.Time
	V float64
}

// Series is samples in time order.
type Series []Point

// Last is the latest value, NaN when the series is empty.
func (s Series) Last() float64 {
	if len(s) == 0 {
		return math.NaN()
	}
	return s[len(s)-1].V
}

// Since is the part of the series at or after t.
func (s Series) Since(t time.Time) Series {
	for i, p := range s {
		if !p.T.Before(t) {
			return s[i:]
		}
	}
	return nil
}

// Mean is the average value, NaN when empty.
func (s Series) Mean() float64 {
	if len(s) == 0 {
		return math.NaN()
	}
	var sum float64
	for _, p := range s {
		sum += p.V
	}
	return sum / float64(len(s))
}

// Values are the values alone, for sparklines.
func (s Series) Values() []float64 {
	out := make([]float64, len(s))
	for i, p := range s {
		out[i] = p.V
	}
	return out
}

// Fit is a least-squares line through a series: V ≈ Intercept + Slope·t,
// with t in seconds from the first point, and R² its goodness of fit.
type Fit struct {
	Slope     float64 // per second
	Intercept float64
	R2        float64
	// SlopeErr is the slope's standard error: how far the slope itself
	// may be off, given the scatter around the line (0 under 4 points).
	SlopeErr float64
	// Scatter is the residuals' standard deviation: how far a point
	// strays from the line (0 under 3 points).
	Scatter float64
}

// Below is how many Scatters p lies under the line, t0 being the time of
// the first point fitted (0 when the points sat on the line).
func (f Fit) Below(t0 time.Time, p Point) float64 {
	if f.Scatter == 0 {
		return 0
	}
	return (f.Intercept + f.Slope*p.T.Sub(t0).Seconds() - p.V) / f.Scatter
}

// LinearFit fits a line; fewer than three points give a flat fit of R² 0.
func LinearFit(s Series) Fit {
	n := float64(len(s))
	if len(s) < 3 {
		return Fit{Intercept: s.Mean()}
	}
	t0 := s[0].T
	var sx, sy, sxx, sxy float64
	for _, p := range s {
		x := p.T.Sub(t0).Seconds()
		sx += x
		sy += p.V
		sxx += x * x
		sxy += x * p.V
	}
	den := n*sxx - sx*sx
	if den == 0 {
		return Fit{Intercept: sy / n}
	}
	slope := (n*sxy - sx*sy) / den
	icept := (sy - slope*sx) / n
	mean := sy / n
	var ssTot, ssRes float64
	for _, p := range s {
		x := p.T.Sub(t0).Seconds()
		d := p.V - mean
		r := p.V - (icept + slope*x)
		ssTot += d * d
		ssRes += r * r
	}
	r2 := 0.0
	if ssTot > 0 {
		r2 = 1 - ssRes/ssTot
	}
	var slopeErr float64
	if n > 3 {
		slopeErr = math.Sqrt(ssRes / (n - 2) / (sxx - sx*sx/n))
	}
	return Fit{Slope: slope, Intercept: icept, R2: r2, SlopeErr: slopeErr, Scatter: math.Sqrt(ssRes / (n - 2))}
}

// Heatmap is a latency histogram over time: per time step, how many
// observations fell in each bucket (not cumulative).
type Heatmap struct {
	// Bounds are the buckets' upper bounds in seconds, ascending; the last
	// may be +Inf.
	Bounds []float64
	Times  []time.Time
	Counts [][]float64 // [time][bucket]
}

// Total sums the buckets over the steps at or after since.
func (h Heatmap) Total(since time.Time) []float64 {
	out := make([]float64, len(h.Bounds))
	for i, t := range h.Times {
		if t.Before(since) {
			continue
		}
		for b, c := range h.Counts[i] {
			if b < len(out) {
				out[b] += c
			}
		}
	}
	return out
}

// Quantile estimates the q-quantile of per-bucket counts as Prometheus's
// histogram_quantile does: linear within the bucket, the lower bound of
// the first bucket 0, and the highest finite bound for the +Inf bucket.
func Quantile(q float64, bounds, counts []float64) float64 {
	var total float64
	for _, c := range counts {
		total += c
	}
	if total == 0 || len(bounds) == 0 {
		return math.NaN()
	}
	rank := q * total
	var cum float64
	for i, c := range counts {
		if cum+c >= rank && c > 0 {
			lower := 0.0
			if i > 0 {
				lower = bounds[i-1]
			}
			upper := bounds[i]
			if math.IsInf(upper, 1) {
				return lower
			}
			return lower + (upper-lower)*(rank-cum)/c
		}
		cum += c
	}
	return bounds[len(bounds)-1]
}

// ShareAtLeast is the share of observations in buckets whose lower bound
// is at least limit (seconds).
func ShareAtLeast(limit float64, bounds, counts []float64) float64 {
	var total, slow float64
	for i, c := range counts {
		total += c
		lower := 0.0
		if i > 0 {
			lower = bounds[i-1]
		}
		if lower >= limit {
			slow += c
		}
	}
	if total == 0 {
		return 0
	}
	return slow / total
}

// Merge adds heatmaps with the same bounds and times (shards into the
// whole); others are skipped.
func Merge(hs ...Heatmap) Heatmap {
	var out Heatmap
	for _, h := range hs {
		if len(h.Times) == 0 {
			continue
		}
		if out.Times == nil {
			out.Bounds = h.Bounds
			out.Times = h.Times
			out.Counts = make([][]float64, len(h.Counts))
			for i := range h.Counts {
				out.Counts[i] = append([]float64(nil), h.Counts[i]...)
			}
			continue
		}
		if len(h.Bounds) != len(out.Bounds) || len(h.Times) != len(out.Times) {
			continue
		}
		for i := range h.Counts {
			for b := range h.Counts[i] {
				out.Counts[i][b] += h.Counts[i][b]
			}
		}
	}
	return out
}

// SumSeries adds series point by point, by time; points at a time only
// some series have are kept as they are.
func SumSeries(ss ...Series) Series {
	byT := map[int64]float64{}
	var order []time.Time
	for _, s := range ss {
		for _, p := range s {
			k := p.T.UnixNano()
			if _, ok := byT[k]; !ok {
				order = append(order, p.T)
			}
			byT[k] += p.V
		}
	}
	sortTimes(order)
	out := make(Series, len(order))
	for i, t := range order {
		out[i] = Point{t, byT[t.UnixNano()]}
	}
	return out
}
