package search

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"strconv"

	"github.com/shardctl/shardctl/internal/jsonscan"
)

// Item is one search result: its values by field index. Extra holds the
// members of a shard's item this model does not know (a newer Camunda's
// fields), carried as they are.
type Item struct {
	Values []Value
	Extra  map[string]json.RawMessage
}

// NewItem is an item of r with every value absent.
func NewItem(r *Resource) Item { return Item{Values: make([]Value, len(r.Fields))} }

// Set gives the field named name a value; it panics on a name r does
// not have, a programming error.
func (it Item) Set(r *Resource, name string, v Value) Item {
	i := r.Field(name)
	if i < 0 {
		panic("search: " + r.Path + " has no field " + name)
	}
	it.Values[i] = v
	return it
}

// Get is the value of the field named name.
func (it Item) Get(r *Resource, name string) Value {
	if i := r.Field(name); i >= 0 {
		return it.Values[i]
	}
	return Value{}
}

// AppendJSON writes the item as the API returns it: its fields in the
// model's order, absent ones left out.
func (it Item) AppendJSON(r *Resource, b []byte) []byte {
	b = append(b, '{')
	first := true
	member := func(name string) {
		if !first {
			b = append(b, ',')
		}
		first = false
		b = jsonscan.AppendString(b, name)
		b = append(b, ':')
	}
	for i, v := range it.Values {
		if v.Null() && !r.Fields[i].Nullable || r.Fields[i].Hidden {
			continue
		}
		member(r.Fields[i].Name)
		b = v.AppendJSON(b)
	}
	names := make([]string, 0, len(it.Extra))
	for n := range it.Extra {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		member(n)
		b = append(b, it.Extra[n]...)
	}
	return append(b, '}')
}

// DecodeItem reads an item of r as a gateway returns it. It is lenient
// where a newer gateway may differ: an enum value this model does not
// know is kept as it is, members it does not know go to Extra.
func DecodeItem(r *Resource, raw json.RawMessage) (Item, error) {
	s := jsonscan.Scanner{B: raw}
	it, err := decodeItem(r, &s)
	if err == nil && !s.End() {
		err = jsonscan.ErrSyntax
	}
	return it, err
}

func decodeItem(r *Resource, s *jsonscan.Scanner) (Item, error) {
	it := NewItem(r)
	guess := 0 // a gateway writes an item's fields in one order, mostly the model's
	err := s.Object(func(name string) error {
		v, err := s.Value()
		if err != nil {
			return err
		}
		i := -1
		if guess < len(r.Fields) && r.Fields[guess].Name == name {
			i = guess
		} else {
			i = r.Field(name)
		}
		guess = i + 1
		if (i < 0 || r.Fields[i].Hidden || r.Fields[i].Kind == Raw) && !json.Valid(v) {
			// Carried as it is, so it must be JSON.
			return jsonscan.ErrSyntax
		}
		if i < 0 || r.Fields[i].Hidden {
			if it.Extra == nil {
				it.Extra = map[string]json.RawMessage{}
			}
			it.Extra[name] = json.RawMessage(bytes.Clone(v))
			return nil
		}
		val, err := parseValue(&r.Fields[i], v)
		var nv *errNotValue
		if errors.As(err, &nv) && r.Fields[i].Kind == Enum {
			if s, ok := jsonscan.Text(v); ok {
				val, err = EnumValue(s), nil
			}
		}
		if err != nil {
			return errors.New("item property " + strconv.Quote(name) + " is not " + kindWords(r.Fields[i].Kind))
		}
		it.Values[i] = val
		return nil
	})
	if err != nil {
		return Item{}, err
	}
	if it.Values[r.KeyField()].Null() {
		return Item{}, errors.New("item has no " + r.Key)
	}
	return it, nil
}

func kindWords(k Kind) string {
	switch k {
	case Key:
		return "a key"
	case Date:
		return "an RFC 3339 date-time"
	case Int:
		return "a number"
	case Bool:
		return "true or false"
	case Raw:
		return "JSON"
	}
	return "a string"
}
