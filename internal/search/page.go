package search

import (
	"slices"
	"strconv"

	"github.com/shardctl/shardctl/internal/jsonscan"
)

// Window cuts the page a query asks for out of items already filtered
// and sorted by o: from an offset, after a cursor, or the Limit items
// just before one.
func Window(items []Item, o Order, p Page) []Item {
	switch {
	case p.After != nil:
		i, _ := slices.BinarySearchFunc(items, p.After, func(it Item, pos []Value) int {
			if o.CompareCursor(it, pos) <= 0 {
				return -1
			}
			return 1
		})
		return head(items[i:], p.Limit)
	case p.Before != nil:
		j, _ := slices.BinarySearchFunc(items, p.Before, func(it Item, pos []Value) int {
			if o.CompareCursor(it, pos) < 0 {
				return -1
			}
			return 1
		})
		return items[max(0, j-p.Limit):j]
	}
	if p.From >= len(items) {
		return nil
	}
	return head(items[p.From:], p.Limit)
}

func head(items []Item, n int) []Item {
	if len(items) > n {
		return items[:n]
	}
	return items
}

// Sort puts items in o's order.
func Sort(items []Item, o Order) {
	slices.SortFunc(items, o.Compare)
}

// Merge is the page a query asks for out of several parts, each sorted
// by o and each already cut to the query's window over its own items
// (for an offset, the first From+Limit of them): the items of the whole,
// in order, as one store holding all of them would cut it.
func Merge(parts [][]Item, o Order, p Page) []Item {
	var all []Item
	for _, part := range parts {
		all = append(all, part...)
	}
	Sort(all, o)
	switch {
	case p.Before != nil:
		return all[max(0, len(all)-p.Limit):]
	case p.After != nil:
		return head(all, p.Limit)
	}
	if p.From >= len(all) {
		return nil
	}
	return head(all[p.From:], p.Limit)
}

// Result is one page of a search's answer.
type Result struct {
	Items []Item
	// Total counts every item the filter matches, HasMore that the count
	// is a lower bound (a store that caps it).
	Total   int64
	HasMore bool
}

// AppendJSON writes the answer: the items, and the page with the
// cursors of its first and last item (null when it has none).
func (res Result) AppendJSON(r *Resource, o Order, b []byte) []byte {
	b = append(b, `{"items":[`...)
	for i, it := range res.Items {
		if i > 0 {
			b = append(b, ',')
		}
		b = it.AppendJSON(r, b)
	}
	b = append(b, `],"page":{"totalItems":`...)
	b = strconv.AppendInt(b, res.Total, 10)
	b = append(b, `,"hasMoreTotalItems":`...)
	b = strconv.AppendBool(b, res.HasMore)
	b = append(b, `,"startCursor":`...)
	if len(res.Items) == 0 {
		b = append(b, `null,"endCursor":null}}`...)
		return b
	}
	b = jsonscan.AppendString(b, EncodeCursor(o.Position(res.Items[0])))
	b = append(b, `,"endCursor":`...)
	b = jsonscan.AppendString(b, EncodeCursor(o.Position(res.Items[len(res.Items)-1])))
	return append(b, "}}"...)
}

// Run answers q over a store's items: those the filter matches, in the
// query's order, cut to its page, with their count.
func Run(r *Resource, items []Item, q Query) Result {
	var matched []Item
	for _, it := range items {
		if q.Filter.Match(it) {
			matched = append(matched, it)
		}
	}
	return Answer(r, matched, q)
}

// Answer is Run over items the filter already matched (a store that
// filters as it reads): sorted in place and cut.
func Answer(r *Resource, matched []Item, q Query) Result {
	o := q.Order(r)
	Sort(matched, o)
	return Result{Items: Window(matched, o, q.Page), Total: int64(len(matched))}
}
