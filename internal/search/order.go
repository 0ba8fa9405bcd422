package search

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"strconv"
)

// Order is Camunda's order of search results: the sort fields in turn,
// absent values last in either direction, then the entity key
// ascending.
type Order struct {
	Sort []SortField
	Key  int // the key field's index
}

// Compare orders two items.
func (o Order) Compare(a, b Item) int {
	return o.compareValues(a.Values, func(field int) Value { return b.Values[field] }, b.Values[o.Key])
}

// compareValues compares an item's values with a position: the value of
// each sort field, then the key.
func (o Order) compareValues(a []Value, pos func(field int) Value, key Value) int {
	for _, s := range o.Sort {
		if c := compareSorted(a[s.Field], pos(s.Field), s.Desc); c != 0 {
			return c
		}
	}
	return Compare(a[o.Key], key)
}

// compareSorted compares two values of a sort field: absent last, then
// in the field's direction.
func compareSorted(a, b Value, desc bool) int {
	switch {
	case a.Null() && b.Null():
		return 0
	case a.Null():
		return 1
	case b.Null():
		return -1
	}
	c := Compare(a, b)
	if desc {
		return -c
	}
	return c
}

// CompareCursor orders an item against a cursor's position: negative
// when the item comes before it, 0 at it.
func (o Order) CompareCursor(it Item, cursor []Value) int {
	return o.compareValues(it.Values, func(field int) Value {
		for i, s := range o.Sort {
			if s.Field == field {
				return cursor[i]
			}
		}
		return Value{}
	}, cursor[len(o.Sort)])
}

// Position is an item's cursor values: its sort values, then its key.
func (o Order) Position(it Item) []Value {
	pos := make([]Value, 0, len(o.Sort)+1)
	for _, s := range o.Sort {
		pos = append(pos, it.Values[s.Field])
	}
	return append(pos, it.Values[o.Key])
}

// EncodeCursor is the cursor of a position: standard base64 of the JSON
// array of its values, keys and dates as numbers, as Camunda's
// Elasticsearch-backed gateway writes them.
func EncodeCursor(pos []Value) string {
	b := []byte{'['}
	for i, v := range pos {
		if i > 0 {
			b = append(b, ',')
		}
		b = v.appendCursorJSON(b)
	}
	b = append(b, ']')
	return base64.StdEncoding.EncodeToString(b)
}

// DecodeCursor reads a cursor made by EncodeCursor for the order of sort
// on r. A cursor that does not decode, or holds values of other kinds or
// another count, is refused: it was made for another query.
func DecodeCursor(r *Resource, sort []SortField, text string) ([]Value, error) {
	bad := invalid("The provided cursor '%s' is not valid for this query.", text)
	raw, err := base64.StdEncoding.DecodeString(text)
	if err != nil {
		return nil, bad
	}
	var vals []json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&vals); err != nil || len(vals) != len(sort)+1 {
		return nil, bad
	}
	pos := make([]Value, len(vals))
	for i, raw := range vals {
		f := &r.Fields[r.KeyField()]
		if i < len(sort) {
			f = &r.Fields[sort[i].Field]
		}
		v, ok := cursorValue(f, raw)
		if !ok {
			return nil, bad
		}
		pos[i] = v
	}
	if pos[len(pos)-1].Null() {
		return nil, bad
	}
	return pos, nil
}

func cursorValue(f *Field, raw json.RawMessage) (Value, bool) {
	raw = bytes.TrimSpace(raw)
	if string(raw) == "null" {
		return Value{}, true
	}
	switch f.Kind {
	case Key, Date, Int:
		n, err := strconv.ParseInt(string(raw), 10, 64)
		if err != nil {
			return Value{}, false
		}
		return Value{Kind: f.Kind, N: n}, true
	case Bool:
		b, err := strconv.ParseBool(string(raw))
		if err != nil {
			return Value{}, false
		}
		return BoolValue(b), true
	case String, Enum:
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return Value{}, false
		}
		return Value{Kind: f.Kind, S: s}, true
	}
	return Value{}, false
}
