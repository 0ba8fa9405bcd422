package search

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"

	"github.com/shardctl/shardctl/internal/jsonscan"
)

// DefaultLimit is a page's size when the request names none.
const DefaultLimit = 100

// Query is a parsed search request.
type Query struct {
	Filter Filter
	Sort   []SortField
	Page   Page
}

// SortField is one entry of the requested order.
type SortField struct {
	Field int // index in the resource's fields
	Desc  bool
}

// Page is the requested window: From items in (From, Limit), or the
// Limit items after or before a cursor's position.
type Page struct {
	From          int
	Limit         int
	After, Before []Value // decoded cursors: the sort values, then the key
	// AfterText and BeforeText are the cursors as the client sent them.
	AfterText, BeforeText string
}

// Error is a request the API refuses, with the status and title Camunda's
// gateway gives it.
type Error struct {
	Status int
	Title  string
	Detail string
}

func (e *Error) Error() string { return e.Detail }

// invalid is a request the gateway's validation refuses (400
// INVALID_ARGUMENT).
func invalid(format string, a ...any) *Error {
	return &Error{http.StatusBadRequest, "INVALID_ARGUMENT", fmt.Sprintf(format, a...)}
}

// unreadable is a property that does not deserialize (Spring's 400 Bad
// Request).
func unreadable(property string, why string) *Error {
	d := "Request property [" + property + "] cannot be parsed"
	if why != "" {
		d += ": " + why
	}
	return &Error{http.StatusBadRequest, "Bad Request", d}
}

// Parse reads a search request's body for r. An empty body is the whole
// resource's first page in key order.
func Parse(r *Resource, body []byte) (Query, error) {
	q := Query{Page: Page{Limit: DefaultLimit}}
	if len(bytes.TrimSpace(body)) == 0 {
		return q, nil
	}
	top, err := object(body, "")
	if err != nil {
		return q, err
	}
	for name, raw := range top {
		switch name {
		case "filter":
			q.Filter, err = parseFilter(r, raw)
		case "sort":
			q.Sort, err = parseSort(r, raw)
		case "page":
			q.Page, err = parsePage(raw)
		default:
			err = unreadable(name, "unknown property")
		}
		if err != nil {
			return q, err
		}
	}
	if q.Page.AfterText != "" {
		if q.Page.After, err = DecodeCursor(r, q.Sort, q.Page.AfterText); err != nil {
			return q, err
		}
	}
	if q.Page.BeforeText != "" {
		if q.Page.Before, err = DecodeCursor(r, q.Sort, q.Page.BeforeText); err != nil {
			return q, err
		}
	}
	return q, nil
}

// object reads a JSON object's members; path names it in an error.
func object(raw []byte, path string) (map[string]json.RawMessage, error) {
	var m map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&m); err != nil || m == nil && string(bytes.TrimSpace(raw)) != "null" {
		if path == "" {
			return nil, &Error{http.StatusBadRequest, "Bad Request", "Failed to read request: the body is not a JSON object"}
		}
		return nil, unreadable(path, "")
	}
	if dec.More() {
		return nil, &Error{http.StatusBadRequest, "Bad Request", "Failed to read request: more than one JSON value"}
	}
	return m, nil
}

func parseSort(r *Resource, raw json.RawMessage) ([]SortField, error) {
	var entries []map[string]json.RawMessage
	if err := json.Unmarshal(raw, &entries); err != nil {
		return nil, unreadable("sort", "")
	}
	out := make([]SortField, 0, len(entries))
	for i, e := range entries {
		var sf SortField
		var field, order string
		for name, v := range e {
			var s *string
			switch name {
			case "field":
				s = &field
			case "order":
				s = &order
			default:
				return nil, unreadable(fmt.Sprintf("sort[%d].%s", i, name), "unknown property")
			}
			if string(bytes.TrimSpace(v)) == "null" {
				continue
			}
			if err := json.Unmarshal(v, s); err != nil {
				return nil, unreadable(fmt.Sprintf("sort[%d].%s", i, name), "")
			}
		}
		if field == "" {
			return nil, invalid("Sort field must not be null.")
		}
		sf.Field = r.Field(field)
		if sf.Field < 0 || !r.Fields[sf.Field].Sort {
			return nil, invalid("Unexpected value '%s' for enum field 'field'. Use any of the following values: [%s]", field, r.sortNames())
		}
		switch order {
		case "", "ASC", "asc":
		case "DESC", "desc":
			sf.Desc = true
		default:
			return nil, invalid("Unexpected value '%s' for enum field 'order'. Use any of the following values: [ASC, DESC]", order)
		}
		out = append(out, sf)
	}
	return out, nil
}

func parsePage(raw json.RawMessage) (Page, error) {
	p := Page{Limit: DefaultLimit}
	m, err := object(raw, "page")
	if err != nil {
		return p, err
	}
	var hasFrom bool
	for name, v := range m {
		if string(bytes.TrimSpace(v)) == "null" {
			continue
		}
		switch name {
		case "from", "limit":
			var n int
			if err := json.Unmarshal(v, &n); err != nil {
				return p, unreadable("page."+name, "")
			}
			// Camunda clamps a negative from or limit to 0.
			n = max(n, 0)
			if name == "from" {
				p.From, hasFrom = n, true
			} else {
				p.Limit = n
			}
		case "after", "before":
			var s string
			if err := json.Unmarshal(v, &s); err != nil {
				return p, unreadable("page."+name, "")
			}
			if name == "after" {
				p.AfterText = s
			} else {
				p.BeforeText = s
			}
		default:
			return p, unreadable("page."+name, "unknown property")
		}
	}
	switch {
	case p.AfterText != "" && p.BeforeText != "":
		return p, invalid("Both after and before cannot be set at the same time.")
	case hasFrom && (p.AfterText != "" || p.BeforeText != ""):
		return p, invalid("Both after/before and from cannot be set at the same time.")
	}
	return p, nil
}

// Order is how a query orders items: its sort fields, then the key.
func (q Query) Order(r *Resource) Order {
	return Order{Sort: q.Sort, Key: r.KeyField()}
}

// AppendJSON writes q as a request body, its cursors as AfterText and
// BeforeText say (a caller that moves a cursor sets them).
func (q Query) AppendJSON(r *Resource, b []byte) []byte {
	b = append(b, `{"filter":`...)
	b = q.Filter.AppendJSON(r, b)
	b = append(b, `,"sort":[`...)
	for i, s := range q.Sort {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"field":`...)
		b = jsonscan.AppendString(b, r.Fields[s.Field].Name)
		if s.Desc {
			b = append(b, `,"order":"DESC"}`...)
		} else {
			b = append(b, `,"order":"ASC"}`...)
		}
	}
	b = append(b, `],"page":{"limit":`...)
	b = strconv.AppendInt(b, int64(q.Page.Limit), 10)
	switch {
	case q.Page.AfterText != "":
		b = append(b, `,"after":`...)
		b = jsonscan.AppendString(b, q.Page.AfterText)
	case q.Page.BeforeText != "":
		b = append(b, `,"before":`...)
		b = jsonscan.AppendString(b, q.Page.BeforeText)
	case q.Page.From > 0:
		b = append(b, `,"from":`...)
		b = strconv.AppendInt(b, int64(q.Page.From), 10)
	}
	return append(b, "}}"...)
}
