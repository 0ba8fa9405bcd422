package bpmn

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
)

// Condition is a sequence flow condition in the FEEL subset the simulator
// understands: comparisons (=, !=, <, <=, >, >=) of a variable path with a
// literal (number, "string", true, false, null), a bare boolean variable,
// and `and` / `or` between them (and binds tighter), e.g.
// `= amount > 100 and status = "open"`.
type Condition struct {
	source string
	or     [][]comparison // disjunction of conjunctions
}

type comparison struct {
	path  []string
	op    string // "" for a bare boolean variable
	value any    // float64, string, bool or nil
}

func (c *Condition) String() string { return c.source }

// ParseCondition parses a conditionExpression body.
func ParseCondition(expr string) (*Condition, error) {
	src := strings.TrimSpace(expr)
	body, ok := strings.CutPrefix(src, "=")
	if !ok {
		return nil, fmt.Errorf("condition %q is not an expression: it must start with '='", src)
	}
	toks, err := tokenize(body)
	if err != nil {
		return nil, fmt.Errorf("condition %q: %v", src, err)
	}
	c := &Condition{source: src}
	var conj []comparison
	for i := 0; i < len(toks); {
		cmp, n, err := parseComparison(toks[i:])
		if err != nil {
			return nil, fmt.Errorf("condition %q: %v", src, err)
		}
		conj = append(conj, cmp)
		i += n
		if i == len(toks) {
			break
		}
		switch toks[i] {
		case "and":
		case "or":
			c.or = append(c.or, conj)
			conj = nil
		default:
			return nil, fmt.Errorf("condition %q: expected 'and' or 'or', found %q", src, toks[i])
		}
		i++
		if i == len(toks) {
			return nil, fmt.Errorf("condition %q: ends after %q", src, toks[i-1])
		}
	}
	if len(conj) == 0 {
		return nil, fmt.Errorf("condition %q is empty", src)
	}
	c.or = append(c.or, conj)
	return c, nil
}

func parseComparison(toks []string) (comparison, int, error) {
	path, err := parsePath(toks[0])
	if err != nil {
		return comparison{}, 0, err
	}
	if len(toks) == 1 || toks[1] == "and" || toks[1] == "or" {
		return comparison{path: path}, 1, nil
	}
	op := toks[1]
	switch op {
	case "=", "!=", "<", "<=", ">", ">=":
	default:
		return comparison{}, 0, fmt.Errorf("unsupported operator %q", op)
	}
	if len(toks) < 3 {
		return comparison{}, 0, fmt.Errorf("missing value after %q", op)
	}
	v, err := parseLiteral(toks[2])
	if err != nil {
		return comparison{}, 0, err
	}
	return comparison{path: path, op: op, value: v}, 3, nil
}

func parsePath(tok string) ([]string, error) {
	parts := strings.Split(tok, ".")
	for _, p := range parts {
		if p == "" || !(unicode.IsLetter(rune(p[0])) || p[0] == '_') {
			return nil, fmt.Errorf("expected a variable name, found %q", tok)
		}
		for _, r := range p {
			if !(unicode.IsLetter(r) || unicode.IsDigit(r) || r == '_') {
				return nil, fmt.Errorf("expected a variable name, found %q", tok)
			}
		}
	}
	return parts, nil
}

func parseLiteral(tok string) (any, error) {
	switch tok {
	case "true":
		return true, nil
	case "false":
		return false, nil
	case "null":
		return nil, nil
	}
	if strings.HasPrefix(tok, `"`) {
		return strconv.Unquote(tok)
	}
	f, err := strconv.ParseFloat(tok, 64)
	if err != nil {
		return nil, fmt.Errorf("expected a literal (number, \"string\", true, false, null), found %q", tok)
	}
	return f, nil
}

func tokenize(s string) ([]string, error) {
	var toks []string
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '"':
			j := i + 1
			for j < len(s) && s[j] != '"' {
				if s[j] == '\\' {
					j++
				}
				j++
			}
			if j >= len(s) {
				return nil, fmt.Errorf("unterminated string")
			}
			toks = append(toks, s[i:j+1])
			i = j + 1
		case strings.ContainsRune("<>!=", rune(c)):
			if i+1 < len(s) && s[i+1] == '=' {
				toks = append(toks, s[i:i+2])
				i += 2
			} else if c == '!' {
				return nil, fmt.Errorf("'!' must be followed by '='")
			} else {
				toks = append(toks, s[i:i+1])
				i++
			}
		default:
			j := i
			for j < len(s) && !strings.ContainsRune(" \t\n\r<>!=\"", rune(s[j])) {
				j++
			}
			toks = append(toks, s[i:j])
			i = j
		}
	}
	return toks, nil
}

// Eval evaluates the condition against process variables. A missing
// variable is null; comparing values of different types is false, as in
// FEEL where such a comparison is null and a null condition does not hold.
func (c *Condition) Eval(vars map[string]any) bool {
	for _, conj := range c.or {
		all := true
		for _, cmp := range conj {
			if !cmp.eval(vars) {
				all = false
				break
			}
		}
		if all {
			return true
		}
	}
	return false
}

func lookup(vars map[string]any, path []string) any {
	var cur any = vars
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[p]
	}
	return cur
}

func (c comparison) eval(vars map[string]any) bool {
	v := lookup(vars, c.path)
	if c.op == "" {
		b, ok := v.(bool)
		return ok && b
	}
	switch want := c.value.(type) {
	case nil:
		switch c.op {
		case "=":
			return v == nil
		case "!=":
			return v != nil
		}
		return false
	case bool:
		got, ok := v.(bool)
		if !ok {
			return false
		}
		switch c.op {
		case "=":
			return got == want
		case "!=":
			return got != want
		}
		return false
	case string:
		got, ok := v.(string)
		if !ok {
			return false
		}
		return compare(strings.Compare(got, want), c.op)
	case float64:
		got, ok := toFloat(v)
		if !ok {
			return false
		}
		switch {
		case got < want:
			return compare(-1, c.op)
		case got > want:
			return compare(1, c.op)
		}
		return compare(0, c.op)
	}
	return false
}

func toFloat(v any) (float64, bool) {
	switch n := v.(type) {
	case float64:
		return n, true
	case int:
		return float64(n), true
	case int64:
		return float64(n), true
	}
	return 0, false
}

func compare(sign int, op string) bool {
	switch op {
	case "=":
		return sign == 0
	case "!=":
		return sign != 0
	case "<":
		return sign < 0
	case "<=":
		return sign <= 0
	case ">":
		return sign > 0
	case ">=":
		return sign >= 0
	}
	return false
}
