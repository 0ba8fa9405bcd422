package main

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/proctest"
)

// serveLines reads docs/output.md: for each serve command's section (by
// its title, e.g. "shardctl proxy serve"), the first and the second
// stderr line it promises, as patterns (HOST:PORT a loopback address,
// STORE a word).
func serveLines(t *testing.T) map[string][]*regexp.Regexp {
	t.Helper()
	first := regexp.MustCompile("first stderr line is `([^`]+)`")
	second := regexp.MustCompile("the second `([^`]+)`")
	placeholders := strings.NewReplacer("HOST:PORT", `127\.0\.0\.1:[0-9]+`, "STORE", `\S+`)
	out := map[string][]*regexp.Regexp{}
	doc := readDoc(t, filepath.Join(repoRoot, "docs", "output.md"))
	for _, section := range strings.Split(doc, "\n## ")[1:] {
		head, body, _ := strings.Cut(section, "\n")
		title := backticked.FindStringSubmatch(head)
		if title == nil || !strings.HasSuffix(title[1], " serve") {
			continue
		}
		prose := strings.Join(strings.Fields(body), " ")
		for _, re := range []*regexp.Regexp{first, second} {
			if m := re.FindStringSubmatch(prose); m != nil {
				out[title[1]] = append(out[title[1]], regexp.MustCompile("^"+placeholders.Replace(regexp.QuoteMeta(m[1]))+"$"))
			}
		}
	}
	return out
}

var textLogLine = regexp.MustCompile(`^time=\S+ level=(DEBUG|INFO|WARN|ERROR) msg=`)

// TestServeFirstLines starts every serve command as a process, in every
// mode (the proxy with --shard and with --registry), and checks that its
// first two stderr lines are those docs/output.md promises, though the
// runtime logs while it starts (a shard added, the registry followed),
// and that the lines after them are log lines in the format asked for.
func TestServeFirstLines(t *testing.T) {
	t.Parallel()
	want := serveLines(t)
	for _, cmd := range []string{"shardctl sim serve", "shardctl registry serve", "shardctl proxy serve"} {
		if len(want[cmd]) != 2 {
			t.Fatalf("docs/output.md, %s: want its first and second stderr lines (\"the first stderr line is `…`, the second `…`\"), found %v", cmd, want[cmd])
		}
	}
	// check waits for a log line holding msg, then reads stderr: the two
	// lines docs/output.md promises, then log lines only.
	check := func(t *testing.T, p *proctest.Process, cmd string, asJSON bool, msg string) {
		t.Helper()
		budget.Eventually(t, 20*time.Second, "a log line with "+msg, func() bool { return strings.Contains(p.Stderr(), msg) })
		lines := strings.Split(p.Stderr(), "\n")
		for i, re := range want[cmd] {
			if !re.MatchString(lines[i]) {
				t.Errorf("%s: stderr line %d is %q, docs/output.md says %s\n%s", cmd, i+1, lines[i], re, p.Stderr())
			}
		}
		for _, l := range lines[2:] {
			if asJSON {
				var v struct{ Level, Msg string }
				if err := json.Unmarshal([]byte(l), &v); err != nil || v.Level == "" || v.Msg == "" {
					t.Errorf("%s --log-format json: %q is not a JSON log line with level and msg (%v)", cmd, l, err)
				}
			} else if !textLogLine.MatchString(l) {
				t.Errorf("%s: %q is not a text log line (time=… level=… msg=…)", cmd, l)
			}
		}
	}

	sim := proctest.Start(t, bin, nil, "sim", "serve", "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--log-format", "json")
	resp, err := http.Post(strings.TrimSuffix(sim.Line(t, "metrics on "), "/metrics")+"/fault/slow?factor=2", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	check(t, sim, "shardctl sim serve", true, `"msg":"fault injected: records slowed down"`)

	reg := proctest.Start(t, bin, nil, "registry", "serve", "--listen", "127.0.0.1:0", "--log-format", "json")
	regURL := "http://" + reg.Addr + "/eureka"
	shard := proctest.Start(t, bin, nil, "sim", "serve", "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0",
		"--register", regURL, "--shard-id", "blue-1", "--pool", "blue")
	shard.Line(t, "registered as shard ")
	check(t, reg, "shardctl registry serve", true, `"msg":"instance registered"`)

	static := proctest.Start(t, bin, nil, "proxy", "serve", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--shard", "blue-1="+shard.Addr)
	check(t, static, "shardctl proxy serve", false, `msg="shard added"`)

	followed := proctest.Start(t, bin, nil, "proxy", "serve", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--registry", regURL,
		"--log-format", "json", "--log-level", "debug")
	check(t, followed, "shardctl proxy serve", true, `"msg":"shard added"`)

	for _, args := range [][]string{
		{"proxy", "serve", "--shard", "a=127.0.0.1:1", "--log-level", "verbose"},
		{"registry", "serve", "--log-format", "xml"},
		{"sim", "serve", "--log-level", "trace"},
	} {
		r := runBin(t, bin, baseEnv(), "", args...)
		flag := args[len(args)-2]
		if r.code != 2 || !strings.Contains(r.stderr, flag+` "`+args[len(args)-1]+`": want`) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and the flag named with what it takes", args, r.code, r.stderr)
		}
	}
}
