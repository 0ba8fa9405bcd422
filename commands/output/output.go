// Package output is the one output layer of every shardctl command: the
// -o table|wide|json|yaml formats, JSON lines for watches, and colour that
// appears only on a terminal. Commands hand it values; they never format
// JSON or align columns themselves.
// It imports nothing of this module, and knows no command.
package output

import (
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"strings"
	"unicode/utf8"

	"sigs.k8s.io/yaml"
)

// Format is a value of the global -o/--output flag.
type Format string

const (
	Table Format = "table"
	Wide  Format = "wide"
	JSON  Format = "json"
	YAML  Format = "yaml"
)

// Formats lists every accepted -o value, in the order help shows them.
var Formats = []Format{Table, Wide, JSON, YAML}

// ParseFormat accepts the -o value; "" means table.
func ParseFormat(s string) (Format, error) {
	if s == "" {
		return Table, nil
	}
	for _, f := range Formats {
		if string(f) == strings.ToLower(s) {
			return f, nil
		}
	}
	return "", fmt.Errorf("unknown output format %q: use one of %s", s, formatList())
}

func formatList() string {
	names := make([]string, len(Formats))
	for i, f := range Formats {
		names[i] = string(f)
	}
	return strings.Join(names, ", ")
}

// Machine reports whether the format is meant for programs, not people.
func (f Format) Machine() bool { return f == JSON || f == YAML }

// Tabular is what a value implements to be printed as a table. The JSON and
// YAML forms come from the value's own json tags, which are the documented,
// stable field names (docs/output.md).
type Tabular interface {
	// Header names the columns; wide adds columns for -o wide.
	Header(wide bool) []string
	// Rows returns the cells, one slice per row, in Header's order. The
	// colour scheme may be used to highlight states.
	Rows(wide bool, c Colors) [][]string
}

// Printer writes values in one format.
type Printer struct {
	Format Format
	Out    io.Writer
	Colors Colors
}

// Print writes v as one document: a table, or one JSON/YAML document.
func (p *Printer) Print(v any) error {
	switch p.Format {
	case JSON:
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return fmt.Errorf("encode JSON: %w", err)
		}
		_, err = fmt.Fprintf(p.Out, "%s\n", b)
		return err
	case YAML:
		b, err := yaml.Marshal(v)
		if err != nil {
			return fmt.Errorf("encode YAML: %w", err)
		}
		_, err = p.Out.Write(b)
		return err
	default:
		t, ok := v.(Tabular)
		if !ok {
			return fmt.Errorf("%T has no table form: use -o json or -o yaml", v)
		}
		wide := p.Format == Wide
		return writeTable(p.Out, t.Header(wide), t.Rows(wide, p.Colors), true, nil)
	}
}

// Stream prints a sequence of values, as a --watch does: JSON lines (one
// compact document per line, flushed as it comes), YAML documents separated
// by "---", or table rows under one header.
type Stream struct {
	p      *Printer
	widths []int // set once the header is printed
	docs   int
}

// Stream starts a sequence printed with p's format.
func (p *Printer) Stream() *Stream { return &Stream{p: p} }

// Emit prints one value of the sequence.
func (s *Stream) Emit(v any) error {
	p := s.p
	switch p.Format {
	case JSON:
		b, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("encode JSON: %w", err)
		}
		_, err = fmt.Fprintf(p.Out, "%s\n", b)
		return err
	case YAML:
		if s.docs > 0 {
			if _, err := io.WriteString(p.Out, "---\n"); err != nil {
				return err
			}
		}
		s.docs++
		return p.Print(v)
	default:
		t, ok := v.(Tabular)
		if !ok {
			return fmt.Errorf("%T has no table form: use -o json or -o yaml", v)
		}
		wide := p.Format == Wide
		header := t.Header(wide)
		first := s.widths == nil
		if first {
			s.widths = make([]int, len(header))
		}
		return writeTable(p.Out, header, t.Rows(wide, p.Colors), first, s.widths)
	}
}

// writeTable aligns rows in columns separated by three spaces. widths
// carries column widths between calls, so that a stream's later rows line
// up under its header; nil means a one-off table.
func writeTable(out io.Writer, header []string, rows [][]string, withHeader bool, widths []int) error {
	all := rows
	if withHeader {
		all = append([][]string{header}, rows...)
	}
	if widths == nil {
		widths = make([]int, len(header))
	}
	// Widths are measured without colour codes; tabwriter would count them.
	for _, r := range all {
		for i, cell := range r {
			if i < len(widths) {
				widths[i] = max(widths[i], visibleWidth(cell))
			}
		}
	}
	var b strings.Builder
	for _, r := range all {
		for i, cell := range r {
			b.WriteString(cell)
			if i < len(r)-1 && i < len(widths) {
				b.WriteString(strings.Repeat(" ", widths[i]-visibleWidth(cell)+3))
			}
		}
		b.WriteByte('\n')
	}
	_, err := io.WriteString(out, b.String())
	return err
}

var ansi = regexp.MustCompile("\x1b\\[[0-9;]*m")

func visibleWidth(s string) int {
	return utf8.RuneCountInString(ansi.ReplaceAllString(s, ""))
}
