package restgateway

import (
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// decodeCreate reads a creation's body in the shapes clients send by
// hand: encoding/json's reflection was a tenth of the REST front's CPU
// on its hottest call. It takes only what encoding/json takes and reads
// the same way (FuzzDecodeCreate holds it to that); anything else, from
// an escaped string or a property in other case to start instructions
// or a malformed body, is false and goes to encoding/json, whose answer
// and error wording stand.
func decodeCreate(b []byte, in *createInstance) bool {
	s := scanner{b: b}
	if !s.next('{') {
		return false
	}
	if s.next('}') {
		return s.end()
	}
	for {
		name, ok := s.plainString()
		if !ok || !s.next(':') {
			return false
		}
		if !s.member(name, in) {
			return false
		}
		if s.next(',') {
			continue
		}
		return s.next('}') && s.end()
	}
}

// member reads the value of property name into in.
func (s *scanner) member(name string, in *createInstance) bool {
	switch name {
	case "processDefinitionId":
		v, ok := s.plainString()
		in.ProcessDefinitionID = &v
		return ok
	case "processDefinitionVersion":
		n, ok := s.integer(32)
		v := int32(n)
		in.ProcessDefinitionVersion = &v
		return ok
	case "processDefinitionKey":
		v, ok := s.plainString()
		if !ok {
			return false
		}
		n, err := strconv.ParseInt(v, 10, 64)
		k := Key(n)
		in.ProcessDefinitionKey = &k
		return err == nil
	case "variables":
		if s.literal("null") {
			in.Variables = nil
			return true
		}
		raw, ok := s.object()
		in.Variables = Object(raw)
		return ok && json.Valid(raw)
	case "tenantId":
		v, ok := s.plainString()
		in.TenantID = v
		return ok
	case "operationReference":
		n, ok := s.integer(64)
		in.OperationReference = &n
		return ok
	case "awaitCompletion":
		switch {
		case s.literal("true"):
			in.AwaitCompletion = true
		case s.literal("false"):
			in.AwaitCompletion = false
		default:
			return false
		}
		return true
	case "requestTimeout":
		n, ok := s.integer(64)
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

// scanner reads JSON tokens from b, skipping the white space before
// each; a token it does not take leaves it where it was.
type scanner struct {
	b []byte
	i int
}

func (s *scanner) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// next takes the punctuation c.
func (s *scanner) next(c byte) bool {
	s.space()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// end: nothing but white space is left.
func (s *scanner) end() bool {
	s.space()
	return s.i == len(s.b)
}

func (s *scanner) literal(word string) bool {
	s.space()
	if len(s.b)-s.i >= len(word) && string(s.b[s.i:s.i+len(word)]) == word {
		s.i += len(word)
		return true
	}
	return false
}

// plainString is a string without escapes, control characters or
// invalid UTF-8 (which encoding/json would unescape or replace).
func (s *scanner) plainString() (string, bool) {
	s.space()
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return "", false
	}
	start, ascii := s.i+1, true
	for j := start; j < len(s.b); j++ {
		switch c := s.b[j]; {
		case c == '"':
			v := s.b[start:j]
			if !ascii && !utf8.Valid(v) {
				return "", false
			}
			s.i = j + 1
			return string(v), true
		case c == '\\' || c < 0x20:
			return "", false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return "", false
}

// integer is a JSON number without fraction or exponent that fits in
// a signed integer of bits bits.
func (s *scanner) integer(bits int) (int64, bool) {
	s.space()
	j := s.i
	if j < len(s.b) && s.b[j] == '-' {
		j++
	}
	digits := j
	for j < len(s.b) && s.b[j] >= '0' && s.b[j] <= '9' {
		j++
	}
	if j == digits || (s.b[digits] == '0' && j > digits+1) {
		return 0, false
	}
	if j < len(s.b) && (s.b[j] == '.' || s.b[j] == 'e' || s.b[j] == 'E') {
		return 0, false
	}
	n, err := strconv.ParseInt(string(s.b[s.i:j]), 10, bits)
	if err != nil {
		return 0, false
	}
	s.i = j
	return n, true
}

// strings is an array of plain strings; null is none.
func (s *scanner) strings() ([]string, bool) {
	if s.literal("null") {
		return nil, true
	}
	if !s.next('[') {
		return nil, false
	}
	out := []string{}
	if s.next(']') {
		return out, true
	}
	for {
		v, ok := s.plainString()
		if !ok {
			return nil, false
		}
		out = append(out, v)
		if s.next(',') {
			continue
		}
		return out, s.next(']')
	}
}

// object is the bytes of the object that comes next, found by its
// brackets and strings only: the caller checks it (json.Valid).
func (s *scanner) object() ([]byte, bool) {
	s.space()
	if s.i >= len(s.b) || s.b[s.i] != '{' {
		return nil, false
	}
	depth, inString := 0, false
	for j := s.i; j < len(s.b); j++ {
		c := s.b[j]
		if inString {
			switch c {
			case '\\':
				j++
			case '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth == 0 {
				raw := s.b[s.i : j+1]
				s.i = j + 1
				return raw, true
			}
		}
	}
	return nil, false
}
