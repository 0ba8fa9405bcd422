package tui

import (
	"strings"
)

// StagesChart draws a capacity run as the scissors of `top`: started/s
// (●) and completed/s (○) per stage, the gap shaded, each stage per
// columns wide and the chart height rows high, y axis labelled.
func StagesChart(started, completed []float64, per, height int) string {
	per, height = max(per, 1), max(height, 3)
	widen := func(vs []float64) []float64 {
		out := make([]float64, 0, len(vs)*per)
		for _, v := range vs {
			for range per {
				out = append(out, v)
			}
		}
		return out
	}
	a, b := widen(started), widen(completed)
	const axis = 8
	c := newChart(max(len(a), 1), height, maxOf(a, b))
	c.lines(a, b)
	var out strings.Builder
	out.WriteString(styleBold.Render("scissors") + "  " + styleLineA.Render("● started/s") + "  " + styleLineB.Render("○ completed/s") + "  ░ gap   one stage = " + strings.Repeat("─", per) + "\n")
	out.WriteString(plot(c, axis))
	return out.String()
}
