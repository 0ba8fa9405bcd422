package restgateway

import (
	"encoding/json"
	"strconv"

	"github.com/shardctl/shardctl/internal/jsonscan"
)

// decodeCreate reads a creation's body in the shapes clients send by
// hand: encoding/json's reflection was a tenth of the REST front's CPU
// on its hottest call. It takes only what encoding/json takes and reads
// the same way (FuzzDecodeCreate holds it to that); anything else, from
// an escaped string or a property in other case to start instructions
// or a malformed body, is false and goes to encoding/json, whose answer
// and error wording stand.
func decodeCreate(b []byte, in *createInstance) bool {
	s := scanner{jsonscan.Scanner{B: b}}
	if !s.Next('{') {
		return false
	}
	if s.Next('}') {
		return s.End()
	}
	for {
		name, ok := s.PlainString()
		if !ok || !s.Next(':') {
			return false
		}
		if !s.member(name, in) {
			return false
		}
		if s.Next(',') {
			continue
		}
		return s.Next('}') && s.End()
	}
}

// member reads the value of property name into in.
func (s *scanner) member(name string, in *createInstance) bool {
	switch name {
	case "processDefinitionId":
		v, ok := s.PlainString()
		in.ProcessDefinitionID = &v
		return ok
	case "processDefinitionVersion":
		n, ok := s.Integer(32)
		v := int32(n)
		in.ProcessDefinitionVersion = &v
		return ok
	case "processDefinitionKey":
		v, ok := s.PlainString()
		if !ok {
			return false
		}
		n, err := strconv.ParseInt(v, 10, 64)
		k := Key(n)
		in.ProcessDefinitionKey = &k
		return err == nil
	case "variables":
		if s.Literal("null") {
			in.Variables = nil
			return true
		}
		raw, ok := s.object()
		in.Variables = Object(raw)
		return ok && json.Valid(raw)
	case "tenantId":
		v, ok := s.PlainString()
		in.TenantID = v
		return ok
	case "operationReference":
		n, ok := s.Integer(64)
		in.OperationReference = &n
		return ok
	case "awaitCompletion":
		switch {
		case s.Literal("true"):
			in.AwaitCompletion = true
		case s.Literal("false"):
			in.AwaitCompletion = false
		default:
			return false
		}
		return true
	case "requestTimeout":
		n, ok := s.Integer(64)
		in.RequestTimeout = n
		return ok
	case "tags":
		v, ok := s.strings()
		in.Tags = v
		return ok
	case "fetchVariables":
		v, ok := s.strings()
		in.FetchVariables = v
		return ok
	}
	return false
}

// scanner is jsonscan's, with what a creation's body needs besides.
type scanner struct{ jsonscan.Scanner }

// strings is an array of plain strings; null is none.
func (s *scanner) strings() ([]string, bool) {
	if s.Literal("null") {
		return nil, true
	}
	if !s.Next('[') {
		return nil, false
	}
	out := []string{}
	if s.Next(']') {
		return out, true
	}
	for {
		v, ok := s.PlainString()
		if !ok {
			return nil, false
		}
		out = append(out, v)
		if s.Next(',') {
			continue
		}
		return out, s.Next(']')
	}
}

// object is the bytes of the object that comes next, found by its
// brackets and strings only: the caller checks it (json.Valid).
func (s *scanner) object() ([]byte, bool) {
	s.Space()
	if s.I >= len(s.B) || s.B[s.I] != '{' {
		return nil, false
	}
	raw, err := s.Value()
	return raw, err == nil
}
