package bpmn

import (
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"strings"
)

// node is a namespace-agnostic XML element: BPMN files from different
// modelers use different prefixes (bpmn:, bpmn2:, none), so only local
// names are compared.
type node struct {
	name     string
	attrs    map[string]string // by local name; the last one wins
	children []*node
	text     strings.Builder
}

func (n *node) attr(name string) string { return n.attrs[name] }

func (n *node) child(name string) *node {
	for _, c := range n.children {
		if c.name == name {
			return c
		}
	}
	return nil
}

// maxDepth and maxNodes bound what a deployment may make the parser hold;
// a real process model is far smaller.
const (
	maxDepth = 64
	maxNodes = 200_000
)

func parseTree(data []byte) (*node, error) {
	dec := xml.NewDecoder(strings.NewReader(string(data)))
	dec.Strict = true
	var stack []*node
	var root *node
	count := 0
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("not well-formed XML: %v", err)
		}
		switch t := tok.(type) {
		case xml.StartElement:
			count++
			if count > maxNodes || len(stack) >= maxDepth {
				return nil, fmt.Errorf("XML too large or too deeply nested")
			}
			n := &node{name: t.Name.Local, attrs: make(map[string]string, len(t.Attr))}
			for _, a := range t.Attr {
				if a.Name.Space == "xmlns" || a.Name.Local == "xmlns" {
					continue
				}
				n.attrs[a.Name.Local] = a.Value
			}
			if len(stack) == 0 {
				if root != nil {
					return nil, fmt.Errorf("not well-formed XML: more than one root element")
				}
				root = n
			} else {
				p := stack[len(stack)-1]
				p.children = append(p.children, n)
			}
			stack = append(stack, n)
		case xml.EndElement:
			stack = stack[:len(stack)-1]
		case xml.CharData:
			if len(stack) > 0 {
				stack[len(stack)-1].text.Write(t)
			}
		}
	}
	if root == nil {
		return nil, fmt.Errorf("not well-formed XML: no root element")
	}
	return root, nil
}
