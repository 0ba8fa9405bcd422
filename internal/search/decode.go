package search

import (
	"errors"
	"strconv"

	"github.com/shardctl/shardctl/internal/jsonscan"
)

// DecodeResult reads a gateway's search answer: its items, read as
// DecodeItem reads one, and its page's counts.
func DecodeResult(r *Resource, body []byte) (Result, error) {
	var res Result
	s := jsonscan.Scanner{B: body}
	err := s.Object(func(name string) error {
		switch name {
		case "items":
			if s.Literal("null") {
				return nil
			}
			return s.Array(func() error {
				it, err := decodeItem(r, &s)
				if err != nil {
					return err
				}
				res.Items = append(res.Items, it)
				return nil
			})
		case "page":
			if s.Literal("null") {
				return nil
			}
			return s.Object(func(name string) error {
				v, err := s.Value()
				if err != nil {
					return err
				}
				switch name {
				case "totalItems":
					res.Total, err = strconv.ParseInt(string(v), 10, 64)
				case "hasMoreTotalItems":
					res.HasMore = string(v) == "true"
				}
				return err
			})
		}
		_, err := s.Value()
		return err
	})
	if err == nil && !s.End() {
		err = jsonscan.ErrSyntax
	}
	if err != nil {
		return Result{}, errors.New("the answer does not read as a search result: " + err.Error())
	}
	return res, nil
}
