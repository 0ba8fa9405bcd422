// Package search is the query side of Camunda 8.8's REST API (/v2) as
// one model: which resources can be searched, by which fields and
// operators, how a request's filter, sort and page read, how items
// compare, and what a cursor holds. The simulator answers searches with
// it over its own state; the proxy parses a client's search with it,
// asks every shard, and merges the answers with the same order, so a
// federation pages as one cluster would.
//
// The order is Camunda's: the requested sort fields in turn, absent
// values last in either direction, then the entity key ascending as the
// tie-breaker. A cursor is the position of an item in that order, not
// an offset: base64 of the JSON array of its sort values and its key
// (keys and dates as numbers, as Elasticsearch's sort values are), so
// the same cursor means the same place to every shard.
//
// It imports nothing of the simulator or the proxy.
package search
