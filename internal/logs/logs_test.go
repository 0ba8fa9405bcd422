package logs

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// decode reads JSON log lines.
func decode(t *testing.T, b *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("not a JSON line: %q: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

func TestRepeats(t *testing.T) {
	const every = 10 * time.Second
	// A step logs a line of kind key at a time, or (flush) flushes then.
	type step struct {
		at    time.Duration
		key   string
		flush bool
		all   bool
	}
	log := func(at time.Duration, key string) step { return step{at: at, key: key} }
	flush := func(at time.Duration) step { return step{at: at, flush: true} }
	// written is a line written: its kind (its "n" field tells which
	// line of the kind it is) and the count it carries.
	type written struct {
		key        string
		n          int
		suppressed int
	}
	for _, tc := range []struct {
		name  string
		steps []step
		want  []written
	}{
		{"a lone line is written at once", []step{log(0, "a")}, []written{{"a", 1, 0}}},
		{"lines an interval apart are all written", []step{log(0, "a"), log(every, "a"), log(3*every, "a")},
			[]written{{"a", 1, 0}, {"a", 2, 0}, {"a", 3, 0}}},
		{"a burst: the first, then the next after the interval with the count",
			[]step{log(0, "a"), log(time.Second, "a"), log(2*time.Second, "a"), log(9*time.Second, "a"), log(every, "a")},
			[]written{{"a", 1, 0}, {"a", 5, 3}}},
		{"kinds count apart", []step{log(0, "a"), log(0, "b"), log(time.Second, "a"), log(time.Second, "b"), log(2*time.Second, "b")},
			[]written{{"a", 1, 0}, {"b", 1, 0}}},
		{"a burst that ends: flush writes its latest line with the count",
			[]step{log(0, "a"), log(time.Second, "a"), log(2*time.Second, "a"), flush(5 * time.Second), flush(every + time.Second)},
			[]written{{"a", 1, 0}, {"a", 3, 2}}},
		{"after a flush the interval starts again",
			[]step{log(0, "a"), log(time.Second, "a"), flush(every), log(every+time.Second, "a"), log(2*every+time.Second, "a")},
			[]written{{"a", 1, 0}, {"a", 2, 1}, {"a", 4, 1}}},
		{"flush writes nothing for a kind that was not suppressed, and forgets it",
			[]step{log(0, "a"), flush(every), log(every+time.Second, "a")},
			[]written{{"a", 1, 0}, {"a", 2, 0}}},
		{"flush all writes what is held at once",
			[]step{log(0, "a"), log(time.Second, "a"), log(0, "b"), {at: 2 * time.Second, flush: true, all: true}},
			[]written{{"a", 1, 0}, {"b", 1, 0}, {"a", 2, 1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			start := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
			now := start
			r := NewRepeats(slog.New(slog.NewJSONHandler(&buf, nil)), every, func() time.Time { return now })
			count := map[string]int{}
			for _, s := range tc.steps {
				now = start.Add(s.at)
				switch {
				case s.all:
					r.FlushAll()
				case s.flush:
					r.Flush()
				default:
					count[s.key]++
					r.Log(slog.LevelWarn, s.key, "shard cooling off", "kind", s.key, "n", count[s.key])
				}
			}
			var got []written
			for _, l := range decode(t, &buf) {
				if l["msg"] != "shard cooling off" || l["level"] != "WARN" {
					t.Errorf("line %v: want the message and level logged", l)
				}
				sup, _ := l[Suppressed].(float64)
				got = append(got, written{l["kind"].(string), int(l["n"].(float64)), int(sup)})
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("written %v, want %v", got, tc.want)
			}
		})
	}
}

// A level the logger leaves out is not counted either.
func TestRepeatsBelowLevel(t *testing.T) {
	var buf bytes.Buffer
	r := NewRepeats(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn})), time.Second, nil)
	r.Log(slog.LevelInfo, "a", "quiet")
	r.Log(slog.LevelWarn, "a", "loud")
	if lines := decode(t, &buf); len(lines) != 1 || lines[0]["msg"] != "loud" || lines[0][Suppressed] != nil {
		t.Errorf("lines %v, want the warning alone, nothing suppressed", lines)
	}
}

func TestHeld(t *testing.T) {
	var out bytes.Buffer
	h := Hold(&out)
	log := slog.New(slog.NewTextHandler(h, nil))
	log.Info("shard added", "shard", "blue-1")
	if out.Len() != 0 {
		t.Fatalf("written before Open: %q", out.String())
	}
	out.WriteString("listening on 127.0.0.1:1\n")
	if err := h.Open(); err != nil {
		t.Fatal(err)
	}
	log.Info("shard down", "shard", "blue-1")
	if err := h.Open(); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 || lines[0] != "listening on 127.0.0.1:1" || !strings.Contains(lines[1], `msg="shard added"`) || !strings.Contains(lines[2], `msg="shard down"`) {
		t.Errorf("lines %q: want the listening line, then the held line, then the later one", lines)
	}
}

func TestNew(t *testing.T) {
	for _, tc := range []struct {
		level, format string
		err           string
		logs          []string // of a debug, an info and a warn line
	}{
		{"info", "text", "", []string{`level=INFO msg=b`, `level=WARN msg=c`}},
		{"DEBUG", "json", "", []string{`"level":"DEBUG","msg":"a"`, `"level":"INFO","msg":"b"`, `"level":"WARN","msg":"c"`}},
		{"warn", "text", "", []string{`level=WARN msg=c`}},
		{"error", "text", "", nil},
		{"verbose", "text", `level "verbose": want debug, info, warn, error`, nil},
		{"info", "logfmt", `format "logfmt": want text or json`, nil},
	} {
		var buf bytes.Buffer
		l, err := New(&buf, tc.level, tc.format)
		if tc.err != "" {
			if err == nil || err.Error() != tc.err {
				t.Errorf("New(%q, %q): %v, want %q", tc.level, tc.format, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		l.Debug("a")
		l.Info("b")
		l.Warn("c")
		lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
		if buf.Len() == 0 {
			lines = nil
		}
		if len(lines) != len(tc.logs) {
			t.Errorf("%s/%s: lines %q, want %d", tc.level, tc.format, lines, len(tc.logs))
			continue
		}
		for i, want := range tc.logs {
			if !strings.Contains(lines[i], want) {
				t.Errorf("%s/%s: line %q lacks %q", tc.level, tc.format, lines[i], want)
			}
		}
	}
}
