package output

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
)

type shard struct {
	ID    string `json:"id"`
	State string `json:"state"`
	Slot  int    `json:"slot"`
}

type shardList struct {
	Shards []shard `json:"shards"`
}

func (shardList) Header(wide bool) []string {
	if wide {
		return []string{"ID", "STATE", "SLOT"}
	}
	return []string{"ID", "STATE"}
}

func (l shardList) Rows(wide bool, c Colors) [][]string {
	var rows [][]string
	for _, s := range l.Shards {
		r := []string{s.ID, c.State(s.State)}
		if wide {
			r = append(r, strings.Repeat("*", s.Slot))
		}
		rows = append(rows, r)
	}
	return rows
}

var sample = shardList{Shards: []shard{{"blue-1", "UP", 1}, {"green-long-name", "DRAINING", 2}}}

func TestParseFormat(t *testing.T) {
	tests := []struct {
		in      string
		want    Format
		wantErr bool
	}{
		{"", Table, false},
		{"table", Table, false},
		{"wide", Wide, false},
		{"JSON", JSON, false},
		{"yaml", YAML, false},
		{"xml", "", true},
		{"jsonpath", "", true},
	}
	for _, tt := range tests {
		got, err := ParseFormat(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("ParseFormat(%q) = %q, %v; want %q, err=%v", tt.in, got, err, tt.want, tt.wantErr)
		}
		if err != nil && !strings.Contains(err.Error(), "table, wide, json, yaml") {
			t.Errorf("error %q does not list the accepted formats", err)
		}
	}
}

func TestPrint(t *testing.T) {
	tests := []struct {
		name   string
		format Format
		colors Colors
		want   string
	}{
		{"table", Table, Colors{}, "" +
			"ID                STATE\n" +
			"blue-1            UP\n" +
			"green-long-name   DRAINING\n"},
		{"wide", Wide, Colors{}, "" +
			"ID                STATE      SLOT\n" +
			"blue-1            UP         *\n" +
			"green-long-name   DRAINING   **\n"},
		// Colour codes must not shift the columns.
		{"wide coloured", Wide, Colors{Enabled: true}, "" +
			"ID                STATE      SLOT\n" +
			"blue-1            \x1b[32mUP\x1b[0m         *\n" +
			"green-long-name   \x1b[33mDRAINING\x1b[0m   **\n"},
		{"yaml", YAML, Colors{Enabled: true}, "" +
			"shards:\n" +
			"- id: blue-1\n  slot: 1\n  state: UP\n" +
			"- id: green-long-name\n  slot: 2\n  state: DRAINING\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			p := &Printer{Format: tt.format, Out: &buf, Colors: tt.colors}
			if err := p.Print(sample); err != nil {
				t.Fatal(err)
			}
			if buf.String() != tt.want {
				t.Errorf("got\n%q\nwant\n%q", buf.String(), tt.want)
			}
		})
	}
}

func TestPrintJSONRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	// Colour never reaches machine output.
	p := &Printer{Format: JSON, Out: &buf, Colors: Colors{Enabled: true}}
	if err := p.Print(sample); err != nil {
		t.Fatal(err)
	}
	var back shardList
	if err := json.Unmarshal(buf.Bytes(), &back); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, buf.String())
	}
	if len(back.Shards) != 2 || back.Shards[1].State != "DRAINING" {
		t.Errorf("round trip lost data: %+v", back)
	}
}

func TestPrintWithoutTableForm(t *testing.T) {
	p := &Printer{Format: Table, Out: &bytes.Buffer{}}
	err := p.Print(struct{ A int }{1})
	if err == nil || !strings.Contains(err.Error(), "-o json") {
		t.Errorf("want an error pointing to -o json, got %v", err)
	}
}

func TestStream(t *testing.T) {
	events := []shardList{
		{Shards: []shard{{"a", "UP", 1}}},
		{Shards: []shard{{"a", "DOWN", 1}}},
	}
	tests := []struct {
		format Format
		want   string
	}{
		{JSON, `{"shards":[{"id":"a","state":"UP","slot":1}]}` + "\n" + `{"shards":[{"id":"a","state":"DOWN","slot":1}]}` + "\n"},
		{YAML, "shards:\n- id: a\n  slot: 1\n  state: UP\n---\nshards:\n- id: a\n  slot: 1\n  state: DOWN\n"},
		{Table, "ID   STATE\na    UP\na    DOWN\n"},
	}
	for _, tt := range tests {
		t.Run(string(tt.format), func(t *testing.T) {
			var buf bytes.Buffer
			s := (&Printer{Format: tt.format, Out: &buf}).Stream()
			for _, e := range events {
				if err := s.Emit(e); err != nil {
					t.Fatal(err)
				}
			}
			if buf.String() != tt.want {
				t.Errorf("got\n%q\nwant\n%q", buf.String(), tt.want)
			}
		})
	}
}

func TestColorDecision(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	env := func(kv map[string]string) func(string) string {
		return func(k string) string { return kv[k] }
	}
	tests := []struct {
		name    string
		out     any
		noColor bool
		env     map[string]string
	}{
		{"buffer is no terminal", &bytes.Buffer{}, false, nil},
		{"pipe is no terminal", w, false, nil},
		{"--no-color", w, true, nil},
		{"NO_COLOR", w, false, map[string]string{"NO_COLOR": "1"}},
		{"TERM=dumb", w, false, map[string]string{"TERM": "dumb"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := tt.out.(interface{ Write([]byte) (int, error) })
			if c := ColorDecision(out, tt.noColor, env(tt.env)); c.Enabled {
				t.Errorf("colour enabled; want plain output")
			}
		})
	}
}

func TestColorsPlainWhenDisabled(t *testing.T) {
	c := Colors{}
	for _, s := range []string{"UP", "DOWN", "DRAINING", "other"} {
		if c.State(s) != s {
			t.Errorf("State(%q) = %q with colour off", s, c.State(s))
		}
	}
}
