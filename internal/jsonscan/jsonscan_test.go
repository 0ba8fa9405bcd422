package jsonscan

import "testing"

func TestValue(t *testing.T) {
	for _, tt := range []struct {
		in, want string
		ok       bool
	}{
		{`"a\"b" ,`, `"a\"b"`, true},
		{` {"a":[1,{"b":"}"}]} x`, `{"a":[1,{"b":"}"}]}`, true},
		{`12.5e3,`, `12.5e3`, true},
		{`true}`, `true`, true},
		{`{"a":1`, ``, false},
		{`"open`, ``, false},
		{`,`, ``, false},
	} {
		s := Scanner{B: []byte(tt.in)}
		v, err := s.Value()
		if (err == nil) != tt.ok || string(v) != tt.want {
			t.Errorf("Value(%q) = %q, %v; want %q ok=%v", tt.in, v, err, tt.want, tt.ok)
		}
	}
}

func TestText(t *testing.T) {
	for _, tt := range []struct {
		in, want string
		ok       bool
	}{
		{`"plain"`, "plain", true},
		{`"tab\there"`, "tab\there", true},
		{`"\u00fc"`, "ü", true},
		{`"über"`, "über", true},
		{`"a" `, "a", true}, {`"a"b`, "", false},
		{`plain`, "", false},
		{"\"\xff\"", "\ufffd", true}, // invalid UTF-8 replaced, as encoding/json does
	} {
		if got, ok := Text([]byte(tt.in)); ok != tt.ok || got != tt.want {
			t.Errorf("Text(%q) = %q, %v; want %q, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

func TestObjectAndArray(t *testing.T) {
	s := Scanner{B: []byte(` {"a": [1, 2], "b\u0021": null} `)}
	var names []string
	var n int
	err := s.Object(func(name string) error {
		names = append(names, name)
		if name == "a" {
			return s.Array(func() error { n++; _, err := s.Value(); return err })
		}
		_, err := s.Value()
		return err
	})
	if err != nil || !s.End() || len(names) != 2 || names[1] != "b!" || n != 2 {
		t.Errorf("names %q, %d elements, %v", names, n, err)
	}
	for _, bad := range []string{`{"a" 1}`, `{"a":1,}`, `[1 2]`, `{a:1}`} {
		s := Scanner{B: []byte(bad)}
		err := s.Object(func(string) error { _, err := s.Value(); return err })
		if bad[0] == '[' {
			s = Scanner{B: []byte(bad)}
			err = s.Array(func() error { _, err := s.Value(); return err })
		}
		if err == nil {
			t.Errorf("%s read without an error", bad)
		}
	}
}
