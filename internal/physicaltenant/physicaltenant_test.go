package physicaltenant

import (
	"slices"
	"strings"
	"testing"
)

func TestServes(t *testing.T) {
	for _, tc := range []struct {
		list []string
		sent string
		want bool
	}{
		{nil, "", true},
		{nil, "default", true},
		{nil, "acme", false},
		{[]string{"acme"}, "", false},
		{[]string{"acme"}, "acme", true},
		{[]string{"default", "acme"}, "", true},
		{[]string{"default", "acme"}, "other", false},
	} {
		if got := Serves(tc.list, tc.sent); got != tc.want {
			t.Errorf("Serves(%v, %q) = %v", tc.list, tc.sent, got)
		}
	}
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
		err  string
	}{
		{"", nil, ""},
		{"acme", []string{"acme"}, ""},
		{"default,acme,acme", []string{"default", "acme"}, ""},
		{"a.b_c-1", []string{"a.b_c-1"}, ""},
		{"acme,", nil, "1 to 31"},
		{"a b", nil, "letters, digits"},
		{strings.Repeat("x", 32), nil, "1 to 31"},
	} {
		got, err := Parse(tc.in)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("Parse(%q): %v, want %q", tc.in, err, tc.err)
		case tc.err == "" && (err != nil || !slices.Equal(got, tc.want)):
			t.Errorf("Parse(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		case tc.err == "" && Format(got) != strings.Join(tc.want, ","):
			t.Errorf("Format(Parse(%q)) = %q", tc.in, Format(got))
		}
	}
}
