package output

import (
	"fmt"
	"strings"
)

// Bar draws a share (0-1) as [#####-----] 50%.
func Bar(share float64, width int) string {
	n := int(share*float64(width) + 0.5)
	return fmt.Sprintf("[%s%s] %3.0f%%", strings.Repeat("#", n), strings.Repeat("-", width-n), share*100)
}

// Dash is a table cell's value, "-" when there is none (as kubectl prints).
func Dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
