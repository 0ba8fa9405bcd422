package search

import (
	"bytes"
	"cmp"
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/shardctl/shardctl/internal/jsonscan"
)

// Value is one field's value in an item, a filter or a cursor. The zero
// Value is absent (null): it sorts last in either direction.
type Value struct {
	Kind Kind
	// S is a String's or Enum's text, a Date's text as it was read (""
	// for one made from a time), a Raw value's JSON.
	S string
	// N is a Key, an Int, or a Date in Unix milliseconds.
	N int64
	B bool
}

// Null reports an absent value.
func (v Value) Null() bool { return v.Kind == 0 }

// StringValue, KeyValue, IntValue, BoolValue, DateValue and EnumValue
// make values.
func StringValue(s string) Value { return Value{Kind: String, S: s} }
func KeyValue(k int64) Value     { return Value{Kind: Key, N: k} }
func IntValue(n int64) Value     { return Value{Kind: Int, N: n} }
func BoolValue(b bool) Value     { return Value{Kind: Bool, B: b} }
func EnumValue(s string) Value   { return Value{Kind: Enum, S: s} }
func RawValue(j string) Value    { return Value{Kind: Raw, S: j} }

// DateValue is a date to the millisecond, as the spec prints it.
func DateValue(t time.Time) Value {
	if t.IsZero() {
		return Value{}
	}
	return Value{Kind: Date, N: t.UnixMilli()}
}

// dateLayout is how Camunda prints a date-time: milliseconds always,
// the zone as an offset or Z.
const dateLayout = "2006-01-02T15:04:05.000Z07:00"

// Compare orders two values of one field: absent ones are equal to each
// other and come last (the caller applies that; here they compare as
// equal).
func Compare(a, b Value) int {
	switch a.Kind {
	case Key, Int, Date:
		return cmp.Compare(a.N, b.N)
	case Bool:
		switch {
		case a.B == b.B:
			return 0
		case !a.B:
			return -1
		}
		return 1
	}
	return strings.Compare(a.S, b.S)
}

// Equal reports two values the same (two absent ones included).
func Equal(a, b Value) bool {
	if a.Null() || b.Null() {
		return a.Null() && b.Null()
	}
	return Compare(a, b) == 0
}

// AppendJSON writes v as the spec has it in an item: keys as decimal
// strings, dates as RFC 3339 text.
func (v Value) AppendJSON(b []byte) []byte {
	switch v.Kind {
	case 0:
		return append(b, "null"...)
	case Key:
		b = append(b, '"')
		b = strconv.AppendInt(b, v.N, 10)
		return append(b, '"')
	case Int:
		return strconv.AppendInt(b, v.N, 10)
	case Bool:
		return strconv.AppendBool(b, v.B)
	case Date:
		if v.S != "" {
			return jsonscan.AppendString(b, v.S)
		}
		return jsonscan.AppendString(b, time.UnixMilli(v.N).UTC().Format(dateLayout))
	case Raw:
		return append(b, v.S...)
	}
	return jsonscan.AppendString(b, v.S)
}

// appendCursorJSON writes v as a sort value of a cursor: keys and dates
// as numbers (Elasticsearch's sort values for long and date fields).
func (v Value) appendCursorJSON(b []byte) []byte {
	switch v.Kind {
	case Key, Date:
		return strconv.AppendInt(b, v.N, 10)
	}
	return v.AppendJSON(b)
}

// errNotValue says a JSON value is not of the field's kind; the caller
// words it for the request.
type errNotValue struct{ reason string }

func (e *errNotValue) Error() string { return e.reason }

// parseValue reads a field's value from JSON as an item or a filter has
// it (a key as a decimal string, a date as RFC 3339 text). null is the
// absent value.
func parseValue(f *Field, raw json.RawMessage) (Value, error) {
	raw = bytes.TrimSpace(raw)
	if string(raw) == "null" {
		return Value{}, nil
	}
	switch f.Kind {
	case Raw:
		return RawValue(string(raw)), nil
	case Bool:
		switch string(raw) {
		case "true":
			return BoolValue(true), nil
		case "false":
			return BoolValue(false), nil
		}
		return Value{}, &errNotValue{"type"}
	case Int:
		n, err := strconv.ParseInt(string(raw), 10, 64)
		if err != nil {
			return Value{}, &errNotValue{"type"}
		}
		return IntValue(n), nil
	case Key:
		// A key is a string; a client that sends it as a number is read
		// too (an int64 the JSON number holds exactly).
		s, quoted := jsonscan.Text(raw)
		if !quoted {
			s = string(raw)
		}
		k, err := strconv.ParseInt(s, 10, 64)
		switch {
		case err == nil:
			return KeyValue(k), nil
		case quoted:
			return Value{}, &errNotValue{"key:" + s}
		}
		return Value{}, &errNotValue{"type"}
	}
	s, ok := jsonscan.Text(raw)
	if !ok {
		return Value{}, &errNotValue{"type"}
	}
	switch f.Kind {
	case Date:
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return Value{}, &errNotValue{"date:" + s}
		}
		return Value{Kind: Date, N: t.UnixMilli(), S: s}, nil
	case Enum:
		for _, v := range f.Values {
			if v == s {
				return EnumValue(s), nil
			}
		}
		return Value{}, &errNotValue{"enum:" + s}
	}
	return StringValue(s), nil
}
