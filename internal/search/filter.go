package search

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/shardctl/shardctl/internal/jsonscan"
)

// Op is one filter operator.
type Op uint8

const (
	Eq Op = iota
	Neq
	Exists
	In
	NotIn
	Like
	Gt
	Gte
	Lt
	Lte
)

var opNames = [...]string{Eq: "$eq", Neq: "$neq", Exists: "$exists", In: "$in", NotIn: "$notIn", Like: "$like", Gt: "$gt", Gte: "$gte", Lt: "$lt", Lte: "$lte"}

func (o Op) allowedBy(ops Ops) bool {
	switch o {
	case Eq:
		return ops&(OpEq|Plain) != 0
	case Neq:
		return ops&OpNeq != 0
	case Exists:
		return ops&OpExists != 0
	case In:
		return ops&OpIn != 0
	case NotIn:
		return ops&OpNotIn != 0
	case Like:
		return ops&OpLike != 0
	}
	return ops&OpRange != 0
}

// Cond is one operator on one field; a filter holds all of its conds.
type Cond struct {
	Field  int
	Op     Op
	Value  Value   // Eq, Neq, Like (a String), Gt, Gte, Lt, Lte
	Values []Value // In, NotIn
	Exists bool    // Exists
}

// Filter is a search's filter: every Cond holds, and when Or is not
// empty, every Cond of one of its groups too.
type Filter struct {
	Conds []Cond
	Or    [][]Cond
}

func parseFilter(r *Resource, raw json.RawMessage) (Filter, error) {
	var f Filter
	m, err := object(raw, "filter")
	if err != nil || m == nil {
		return f, err
	}
	for _, name := range sortedNames(m) {
		if name == "$or" && r.Or {
			var groups []json.RawMessage
			if err := json.Unmarshal(m[name], &groups); err != nil {
				return f, unreadable("filter.$or", "")
			}
			for i, g := range groups {
				gm, err := object(g, fmt.Sprintf("filter.$or[%d]", i))
				if err != nil {
					return f, err
				}
				var conds []Cond
				for _, gname := range sortedNames(gm) {
					if conds, err = parseProperty(r, conds, fmt.Sprintf("filter.$or[%d].", i), gname, gm[gname]); err != nil {
						return f, err
					}
				}
				f.Or = append(f.Or, conds)
			}
			continue
		}
		if f.Conds, err = parseProperty(r, f.Conds, "filter.", name, m[name]); err != nil {
			return f, err
		}
	}
	return f, nil
}

func sortedNames(m map[string]json.RawMessage) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// parseProperty reads one filter property: a bare value, or an object of
// operators.
func parseProperty(r *Resource, conds []Cond, prefix, name string, raw json.RawMessage) ([]Cond, error) {
	path := prefix + name
	if slices.Contains(r.Unsupported, name) {
		return nil, invalid("The filter property '%s' of %s is not supported by shardctl.", name, r.Path)
	}
	i := r.Field(name)
	if i < 0 || r.Fields[i].Filter == 0 {
		return nil, unreadable(path, "unknown property")
	}
	f := &r.Fields[i]
	raw = bytes.TrimSpace(raw)
	if string(raw) == "null" {
		return conds, nil
	}
	if len(raw) == 0 || raw[0] != '{' {
		v, err := filterValue(f, path, raw)
		if err != nil {
			return nil, err
		}
		return append(conds, Cond{Field: i, Op: Eq, Value: v}), nil
	}
	if f.Filter == Plain {
		return nil, unreadable(path, "")
	}
	ops, err := object(raw, path)
	if err != nil {
		return nil, err
	}
	for _, opName := range sortedNames(ops) {
		n := slices.Index(opNames[:], opName)
		o := Op(n)
		if n < 0 || !o.allowedBy(f.Filter) {
			return nil, unreadable(path, "")
		}
		c := Cond{Field: i, Op: o}
		v := ops[opName]
		switch o {
		case Exists:
			if err := json.Unmarshal(v, &c.Exists); err != nil {
				return nil, unreadable(path+"."+opName, "")
			}
		case In, NotIn:
			var list []json.RawMessage
			if err := json.Unmarshal(v, &list); err != nil {
				return nil, unreadable(path+"."+opName, "")
			}
			for _, e := range list {
				ev, err := filterValue(f, path, e)
				if err != nil {
					return nil, err
				}
				c.Values = append(c.Values, ev)
			}
		case Like:
			var s string
			if err := json.Unmarshal(v, &s); err != nil {
				return nil, unreadable(path+"."+opName, "")
			}
			c.Value = StringValue(s)
		default:
			if c.Value, err = filterValue(f, path, v); err != nil {
				return nil, err
			}
		}
		conds = append(conds, c)
	}
	return conds, nil
}

// filterValue reads one value of a filter property, with the errors
// Camunda's gateway words for it.
func filterValue(f *Field, path string, raw json.RawMessage) (Value, error) {
	v, err := parseValue(f, raw)
	var nv *errNotValue
	if errors.As(err, &nv) {
		kind, text, _ := strings.Cut(nv.reason, ":")
		switch kind {
		case "key":
			return v, invalid("The provided %s '%s' is not a valid key. Expected a numeric value. Did you pass an entity id instead of an entity key?", f.Name, text)
		case "date":
			return v, invalid("The provided %s '%s' cannot be parsed as a date according to RFC 3339, section 5.6.", f.Name, text)
		case "enum":
			return v, invalid("Unexpected value '%s' for enum field '%s'. Use any of the following values: [%s]", text, f.Name, strings.Join(f.Values, ", "))
		}
		return v, unreadable(path, "")
	}
	return v, err
}

// Match reports whether an item passes the filter.
func (f Filter) Match(it Item) bool {
	if !allHold(f.Conds, it) {
		return false
	}
	if len(f.Or) == 0 {
		return true
	}
	for _, g := range f.Or {
		if allHold(g, it) {
			return true
		}
	}
	return false
}

func allHold(conds []Cond, it Item) bool {
	for i := range conds {
		if !conds[i].holds(it.Values[conds[i].Field]) {
			return false
		}
	}
	return true
}

// holds applies the operator as Elasticsearch's queries do: an absent
// value matches only $exists false, $neq and $notIn.
func (c *Cond) holds(v Value) bool {
	switch c.Op {
	case Exists:
		return v.Null() != c.Exists
	case Neq:
		return v.Null() || !Equal(v, c.Value)
	case NotIn:
		return v.Null() || !slices.ContainsFunc(c.Values, func(x Value) bool { return Equal(v, x) })
	}
	if v.Null() {
		return false
	}
	switch c.Op {
	case Eq:
		return Equal(v, c.Value)
	case In:
		return slices.ContainsFunc(c.Values, func(x Value) bool { return Equal(v, x) })
	case Like:
		return like(c.Value.S, v.S)
	case Gt:
		return Compare(v, c.Value) > 0
	case Gte:
		return Compare(v, c.Value) >= 0
	case Lt:
		return Compare(v, c.Value) < 0
	case Lte:
		return Compare(v, c.Value) <= 0
	}
	return false
}

// like matches Camunda's $like: * any run of characters, ? exactly one,
// a backslash takes the next character as it is; the whole value must
// match.
func like(pattern, s string) bool {
	p, t := []rune(pattern), []rune(s)
	// Iterative wildcard matching with one backtrack point for the last *.
	pi, ti, star, mark := 0, 0, -1, 0
	for ti < len(t) {
		if pi < len(p) {
			switch c := p[pi]; {
			case c == '*':
				star, mark = pi, ti
				pi++
				continue
			case c == '?':
				pi++
				ti++
				continue
			case c == '\\' && pi+1 < len(p):
				if p[pi+1] == t[ti] {
					pi += 2
					ti++
					continue
				}
			case c == t[ti]:
				pi++
				ti++
				continue
			}
		}
		if star < 0 {
			return false
		}
		pi, mark = star+1, mark+1
		ti = mark
	}
	for pi < len(p) && p[pi] == '*' {
		pi++
	}
	return pi == len(p)
}

// Restrict narrows the filter to the items one part of the key space can
// hold (one shard's): keep maps a key value of the filter to that part's
// form and reports whether the part can hold it. A key that cannot occur
// there makes $eq and $in fail (an $in keeps the keys that can), and
// $neq and $notIn hold. ok is false when the part can hold no match.
func (f Filter) Restrict(r *Resource, keep func(field int, v Value) (Value, bool)) (out Filter, ok bool) {
	conds, ok := restrictConds(r, f.Conds, keep)
	if !ok {
		return Filter{}, false
	}
	out.Conds = conds
	if len(f.Or) == 0 {
		return out, true
	}
	for _, g := range f.Or {
		if gc, ok := restrictConds(r, g, keep); ok {
			out.Or = append(out.Or, gc)
		}
	}
	return out, len(out.Or) > 0
}

func restrictConds(r *Resource, conds []Cond, keep func(int, Value) (Value, bool)) ([]Cond, bool) {
	out := make([]Cond, 0, len(conds))
	for _, c := range conds {
		if r.Fields[c.Field].Kind != Key || c.Op == Exists {
			out = append(out, c)
			continue
		}
		switch c.Op {
		case Eq, Neq:
			v, here := keep(c.Field, c.Value)
			switch {
			case here:
				c.Value = v
				out = append(out, c)
			case c.Op == Eq:
				return nil, false
			}
		case In, NotIn:
			var vs []Value
			for _, x := range c.Values {
				if v, here := keep(c.Field, x); here {
					vs = append(vs, v)
				}
			}
			switch {
			case len(vs) > 0:
				c.Values = vs
				out = append(out, c)
			case c.Op == In:
				return nil, false
			}
		}
	}
	return out, true
}

// AppendJSON writes the filter as a request's filter object: an $eq as
// the bare value (which every property takes, plain or advanced), other
// operators in an object per property.
func (f Filter) AppendJSON(r *Resource, b []byte) []byte {
	b = appendConds(r, b, f.Conds, len(f.Or) > 0)
	if len(f.Or) > 0 {
		b = append(b, `"$or":[`...)
		for i, g := range f.Or {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendConds(r, b, g, false)
		}
		b = append(b, "]}"...)
	}
	return b
}

// appendConds writes conds as one object; open leaves it open for more
// members (and ends it with a comma when it has any).
func appendConds(r *Resource, b []byte, conds []Cond, open bool) []byte {
	b = append(b, '{')
	for i := 0; i < len(conds); {
		j := i + 1
		for j < len(conds) && conds[j].Field == conds[i].Field {
			j++
		}
		if i > 0 {
			b = append(b, ',')
		}
		b = jsonscan.AppendString(b, r.Fields[conds[i].Field].Name)
		b = append(b, ':')
		if j == i+1 && conds[i].Op == Eq {
			b = conds[i].Value.AppendJSON(b)
		} else {
			b = append(b, '{')
			for k, c := range conds[i:j] {
				if k > 0 {
					b = append(b, ',')
				}
				b = append(b, '"')
				b = append(b, opNames[c.Op]...)
				b = append(b, `":`...)
				switch c.Op {
				case Exists:
					b = strconv.AppendBool(b, c.Exists)
				case In, NotIn:
					b = append(b, '[')
					for n, v := range c.Values {
						if n > 0 {
							b = append(b, ',')
						}
						b = v.AppendJSON(b)
					}
					b = append(b, ']')
				default:
					b = c.Value.AppendJSON(b)
				}
			}
			b = append(b, '}')
		}
		i = j
	}
	if open {
		if len(conds) > 0 {
			b = append(b, ',')
		}
		return b
	}
	return append(b, '}')
}
