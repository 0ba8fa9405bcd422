package yamlfile

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

type duration time.Duration

func (d *duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	*d = duration(v)
	return err
}

type gate struct {
	Name             string   `json:"name"`
	FailureCondition string   `json:"failureCondition,omitempty"`
	Interval         duration `json:"interval,omitempty"`
	Count            int      `json:"count,omitempty"`
}

type file struct {
	Gates []gate `json:"gates"`
}

func TestDecode(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		want      file
		// line, col and msg of the error; line 0: no positioned error.
		line, col int
		msg       string
	}{
		{name: "good", src: "gates:\n- name: a\n  interval: 10s\n  count: 3\n",
			want: file{Gates: []gate{{Name: "a", Interval: duration(10 * time.Second), Count: 3}}}},
		{name: "json is yaml", src: `{"gates": [{"name": "b", "failureCondition": "x"}]}`,
			want: file{Gates: []gate{{Name: "b", FailureCondition: "x"}}}},
		{name: "typo", src: "gates:\n- name: a\n  failureCondtion: x\n", line: 3, col: 3, msg: `unknown field "failureCondtion"`},
		{name: "wrong type", src: "gates:\n- name: a\n  count: abc\n", line: 3, col: 10, msg: "cannot unmarshal string"},
		{name: "syntax", src: "gates: [\n", line: 1, col: 8, msg: "not found"},
		{name: "a list for a map", src: "- a\n- b\n", line: 1, col: 1, msg: "sequence was used where mapping is expected"},
		{name: "a field's own decoder", src: "gates:\n- name: a\n  interval: 10x\n", msg: `unknown unit "x"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got file
			err := Decode("gates.yaml", []byte(tc.src), &got)
			if tc.msg == "" {
				if err != nil {
					t.Fatal(err)
				}
				a, _ := json.Marshal(got)
				b, _ := json.Marshal(tc.want)
				if string(a) != string(b) {
					t.Fatalf("got %s, want %s", a, b)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.msg) || !strings.HasPrefix(err.Error(), "gates.yaml:") {
				t.Fatalf("error %v: want gates.yaml: … %s", err, tc.msg)
			}
			var ye *Error
			if tc.line == 0 {
				if errors.As(err, &ye) {
					t.Fatalf("%v: a positioned error where there is no position", err)
				}
				return
			}
			if !errors.As(err, &ye) || ye.Line != tc.line || ye.Column != tc.col {
				t.Fatalf("error %#v: want line %d column %d", err, tc.line, tc.col)
			}
			if want := "gates.yaml:" + strconv.Itoa(tc.line) + ":" + strconv.Itoa(tc.col) + ": "; !strings.HasPrefix(err.Error(), want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("%q: want one line starting %q", err, want)
			}
		})
	}
}

func TestRead(t *testing.T) {
	var f file
	if err := Read(filepath.Join(t.TempDir(), "none.yaml"), &f); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a missing file: %v, want ErrNotExist", err)
	}
}
