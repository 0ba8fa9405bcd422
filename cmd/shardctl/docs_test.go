package main

// The docs cannot rot: every shell block of README.md and docs/ runs here
// against the pieces it names (or is listed as not runnable, with why),
// every flag the docs mention exists on the command they mention it with,
// docs/output.md lists exactly the fields the commands print, the README's
// command list is what --help prints, and the advisor's rule is quoted as
// the code states it.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/shardctl/shardctl/commands"
	"github.com/shardctl/shardctl/commands/cmdutil"
	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/proctest"
	"github.com/shardctl/shardctl/internal/proxy/route"
	"github.com/shardctl/shardctl/internal/signals"
	"github.com/shardctl/shardctl/migrate"
	"github.com/shardctl/shardctl/plugins"
)

const repoRoot = "../.."

// docFiles are the documents users read: README.md and docs/*.md.
func docFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil || len(files) == 0 {
		t.Fatalf("docs/*.md: %v", err)
	}
	return append([]string{filepath.Join(repoRoot, "README.md")}, files...)
}

func readDoc(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// fence is one fenced code block.
type fence struct {
	file string
	line int // of the opening ```
	lang string
	body string
}

func (f fence) String() string { return fmt.Sprintf("%s:%d", filepath.Base(f.file), f.line) }

// split separates a document into its fenced blocks and the prose around
// them.
func split(t *testing.T, path string) (fences []fence, prose string) {
	t.Helper()
	var out strings.Builder
	var cur *fence
	var body strings.Builder
	for i, line := range strings.Split(readDoc(t, path), "\n") {
		if strings.HasPrefix(line, "```") {
			if cur == nil {
				cur = &fence{file: path, line: i + 1, lang: strings.TrimSpace(strings.TrimPrefix(line, "```"))}
				body.Reset()
				continue
			}
			cur.body = body.String()
			fences = append(fences, *cur)
			cur = nil
			continue
		}
		if cur != nil {
			body.WriteString(line + "\n")
		} else {
			out.WriteString(line + "\n")
		}
	}
	if cur != nil {
		t.Fatalf("%s: the fence opened here is never closed", cur)
	}
	return fences, out.String()
}

func allFences(t *testing.T) []fence {
	var all []fence
	for _, f := range docFiles(t) {
		fs, _ := split(t, f)
		all = append(all, fs...)
	}
	return all
}

func isShell(lang string) bool {
	return slices.Contains([]string{"sh", "bash", "shell", "console"}, lang)
}

// commandLines are a shell block's commands: continuation lines joined,
// comments and blank lines dropped.
func commandLines(body string) []string {
	var out []string
	var cur strings.Builder
	for _, line := range strings.Split(body, "\n") {
		line = strings.TrimSpace(line)
		if i := strings.Index(line, " #"); i >= 0 {
			line = strings.TrimSpace(line[:i])
		}
		if strings.HasPrefix(line, "#") {
			continue
		}
		if cont, ok := strings.CutSuffix(line, "\\"); ok {
			cur.WriteString(strings.TrimSpace(cont) + " ")
			continue
		}
		cur.WriteString(line)
		if s := strings.TrimSpace(cur.String()); s != "" {
			out = append(out, s)
		}
		cur.Reset()
	}
	return out
}

// notRunnable are the shell blocks (by their first command) this test
// does not run, and why.
var notRunnable = map[string]string{
	"make test": "it is this very suite (make test runs its fast tier, make test-long its long one); CI runs both through .ci/run",
	"shardctl cutover plan --from blue --to green --steps 10,50,100": "its step pauses are real ones (three of 5 minutes, then the drain) and gates.yaml is the reader's; " +
		"TestCutoverEndToEnd runs plan, apply and status with 12-second steps against a federation under load",
	"shardctl sim serve --listen 127.0.0.1:26500 --metrics 127.0.0.1:9600 --rest-listen 127.0.0.1:8080": "app.mjs is the reader's application; " +
		"internal/restgateway's TestCamundaSDK runs Camunda's SDK against a simulator serving --rest-listen, and TestCommandsOverREST every endpoint",
	"shardctl proxy serve --shard a=10.0.0.5:26500 --shard-token-url https://login.example/realms/camunda/protocol/openid-connect/token " +
		"--shard-client-id shardctl-proxy --shard-client-secret-file /etc/shardctl/client-secret --shard-audience zeebe-api": "its token endpoint and shard are the reader's; " +
		"TestSecuredFederation runs these flags against an OpenID provider and simulators that require its tokens, with zbctl logging in through the proxy",
	"make build": "each target takes minutes: make test already builds shardctl, runs make lint's three checks " +
		"and goreleaser check; the bench targets print their own figures and snapshot cross-compiles eight platforms",
}

// notRunnableFiles are documents none of whose shell blocks run here, and
// why; the flags in them are checked all the same.
var notRunnableFiles = map[string]string{
	"kubernetes.md": "it needs a cluster with the manifests applied and real Zeebe gateways; TestK8sCutoverEndToEnd and its siblings run the " +
		"cutover's Kubernetes side against a real kube-apiserver, and deploy/manifests_test.go applies every manifest to it",
	"runbook-cutover.md": "a runbook for production hosts (registry:8761, zeebe-gateway, prometheus:9090) with real step pauses; " +
		"TestCutoverEndToEnd runs the same path against simulators under load",
}

// docBlock says how to run a shell block: the pieces it names but does
// not start itself, and what its full-screen command must draw.
type docBlock struct {
	setup func(t *testing.T, port func(string) string)
	draws []string
	env   []string // added to the block's environment
}

var docBlocks = map[string]docBlock{
	"go run ./cmd/shardctl demo":                                                 {draws: []string{"SHARD", "shard-1", "shard-3"}},
	"shardctl registry serve --listen 127.0.0.1:8761 &":                          {draws: []string{"SHARD", "blue-1", "blue-2"}},
	"shardctl registry serve --listen 127.0.0.1:8761 --store bolt:registry.db &": {},
	"shardctl signals --prometheus http://127.0.0.1:9090":                        {setup: signalsPieces, draws: []string{"scraping 2 targets", "SHARD", "all  created"}},
	"shardctl drain blue-1 --wait --timeout 30m":                                 {setup: drainBlockPieces},
	"shardctl migrate locks --dsn postgres://app@127.0.0.1:5432/shop --table orders,payments --lock-timeout 2s": {
		setup: migrateBlockPieces, env: []string{"PGPASSWORD=" + migratePassword}},
}

// signalsPieces starts what the signals block reads: two simulators with
// metrics on 9601 and 9602, and Prometheus on 9090 scraping them as a
// and b.
func signalsPieces(t *testing.T, port func(string) string) {
	metrics := map[string]string{"a": "127.0.0.1:" + port("9601"), "b": "127.0.0.1:" + port("9602")}
	for _, addr := range metrics {
		proctest.Start(t, bin, nil, "sim", "serve", "--listen", "127.0.0.1:0", "--metrics", addr)
	}
	prom := proctest.Prometheus(t, "127.0.0.1:"+port("9090"), metrics)
	proctest.WaitScraped(t, prom, 2)
}

// drainBlockPieces starts what the drain block acts on: a registry on the
// default port with a simulator registered as blue-1.
func drainBlockPieces(t *testing.T, port func(string) string) {
	regURL := "http://127.0.0.1:" + port(defaultRegistryPort) + "/eureka"
	proctest.Start(t, bin, nil, "registry", "serve", "--listen", "127.0.0.1:"+port(defaultRegistryPort))
	sim := proctest.Start(t, bin, nil, "sim", "serve", "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0",
		"--register", regURL, "--shard-id", "blue-1", "--pool", "blue")
	sim.Line(t, "registered as shard ")
}

// migrateBlockPieces starts what the lock preflight block checks:
// PostgreSQL on the port it names, with the database shop, its role app
// and the tables orders and payments, free.
func migrateBlockPieces(t *testing.T, port func(string) string) {
	p, err := strconv.Atoi(port("5432"))
	if err != nil {
		t.Fatal(err)
	}
	startShop(t, p)
}

func TestDocsShellBlocks(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, f := range allFences(t) {
		if !isShell(f.lang) {
			continue
		}
		lines := commandLines(f.body)
		if len(lines) == 0 {
			continue
		}
		key := lines[0]
		seen[key] = true
		if why, ok := notRunnableFiles[filepath.Base(f.file)]; ok {
			t.Logf("%s: not run: %s", f, why)
			continue
		}
		if why, ok := notRunnable[key]; ok {
			t.Logf("%s: not run: %s", f, why)
			continue
		}
		plan, ok := docBlocks[key]
		if !ok {
			t.Errorf("%s: a shell block this test does not know (%q): add it to docBlocks to run it, or to notRunnable with why not", f, key)
			continue
		}
		t.Run(strings.ReplaceAll(key, "/", "_"), func(t *testing.T) { runDocBlock(t, f, lines, plan) })
	}
	for key := range docBlocks {
		if !seen[key] {
			t.Errorf("docBlocks names a block no document has any more: %q", key)
		}
	}
	for key := range notRunnable {
		if !seen[key] {
			t.Errorf("notRunnable names a block no document has any more: %q", key)
		}
	}
}

var loopbackPort = regexp.MustCompile(`127\.0\.0\.1:(\d+)`)

// defaultRegistryPort is the port of commands.DefaultRegistry.
var defaultRegistryPort = loopbackPort.FindStringSubmatch(cmdutil.DefaultRegistry)[1]

// runDocBlock runs a block's commands in order, as a user at a shell
// would: a command ending in & in the background until it prints its
// "listening on" line (and, with --register, its first registration);
// a full-screen command on a terminal until it draws what it must, then
// q; any other to its end, exit 0. Every loopback port the block names
// is moved to a free one, the same for every mention.
func runDocBlock(t *testing.T, f fence, lines []string, plan docBlock) {
	ports := map[string]string{}
	port := func(p string) string {
		if q, ok := ports[p]; ok {
			return q
		}
		q := strconv.Itoa(proctest.FreePort(t))
		ports[p] = q
		return q
	}
	dir := t.TempDir()
	env := append(baseEnv(binDir), "TERM=xterm-256color", "COLUMNS=120", "LINES=40")
	env = append(env, plan.env...)
	if plan.setup != nil {
		plan.setup(t, port)
	}
	root := newRoot()
	for i, line := range lines {
		line = strings.Replace(line, "go run ./cmd/shardctl", "shardctl", 1)
		lines[i] = loopbackPort.ReplaceAllStringFunc(line, func(m string) string {
			return "127.0.0.1:" + port(loopbackPort.FindStringSubmatch(m)[1])
		})
	}
	// A block that starts a registry on the default port relies on the
	// default --registry: it follows the registry to its new port.
	if p, ok := ports[defaultRegistryPort]; ok {
		env = append(env, "SHARDCTL_REGISTRY=http://127.0.0.1:"+p+"/eureka")
	}
	for _, line := range lines {
		script := "cd " + shellQuote(dir) + " && exec " + strings.TrimSuffix(line, "&")
		switch {
		case strings.HasSuffix(line, "&"):
			if flags := defaultAddresses(root, line); len(flags) > 0 {
				t.Fatalf("%s: %s: it listens on the default address of %s, which the test cannot move to a free port: name it", f, line, strings.Join(flags, ", "))
			}
			p := proctest.Start(t, "bash", env, "-c", script)
			if strings.Contains(line, "--register") {
				p.Line(t, "registered as shard ")
			}
		case fullScreen(root, line):
			runOnTerminal(t, env, script, plan.draws)
		default:
			cmd := exec.CommandContext(budget.Context(t, 60*time.Second), "bash", "-c", script)
			cmd.Env = env
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%s: %s: %v\n%s", f, line, err, out)
			}
			t.Logf("%s\n%s", line, out)
		}
	}
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// fullScreen reports whether a command line draws the dashboard: top, or
// the demo without --no-tui.
func fullScreen(root *cobra.Command, line string) bool {
	c, _, err := root.Find(words(line))
	if err != nil {
		return false
	}
	return c.Name() == "top" || (c.Name() == "demo" && !strings.Contains(line, "--no-tui"))
}

// defaultAddresses lists the flags of a line's command whose default is a
// loopback address and which the line leaves at it.
func defaultAddresses(root *cobra.Command, line string) []string {
	c, _, err := root.Find(words(line))
	if err != nil {
		return nil
	}
	var out []string
	c.Flags().VisitAll(func(fl *pflag.Flag) {
		if loopbackPort.MatchString(fl.DefValue) && !slices.Contains(words(line), "--"+fl.Name) && !strings.Contains(line, "--"+fl.Name+"=") {
			out = append(out, "--"+fl.Name)
		}
	})
	return out
}

// runOnTerminal runs script on a terminal of 120 × 40, waits until the
// screen shows every one of draws, types q, and wants a clean exit.
func runOnTerminal(t *testing.T, env []string, script string, draws []string) {
	t.Helper()
	tm := proctest.StartTerminal(t, "bash", env, 120, 40, "-c", script)
	tm.WaitFor(t, 45*time.Second, draws...)
	tm.Type("q")
	if err := tm.Exit(t, 15*time.Second); err != nil {
		t.Fatalf("%s: exit after q: %v\n%s", script, err, tm.Screen())
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// yamlChecks validate the YAML blocks of the docs, by their first line.
var yamlChecks = map[string]func(path string) error{
	"listen: 127.0.0.1:26500": func(path string) error { _, err := route.LoadFile(path); return err },
	"gates:":                  func(path string) error { _, err := migrate.LoadGates(path); return err },
}

func TestDocsYAMLBlocks(t *testing.T) {
	for _, f := range allFences(t) {
		if f.lang != "yaml" {
			continue
		}
		first, _, _ := strings.Cut(f.body, "\n")
		check, ok := yamlChecks[strings.TrimSpace(first)]
		if !ok {
			t.Errorf("%s: a YAML block this test does not check: add it to yamlChecks", f)
			continue
		}
		path := filepath.Join(t.TempDir(), "doc.yaml")
		if err := os.WriteFile(path, []byte(f.body), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := check(path); err != nil {
			t.Errorf("%s: the documented YAML does not load: %v", f, err)
		}
	}
}

// newRoot is the command tree as the binary builds it.
func newRoot() *cobra.Command {
	g := &cmdutil.Globals{
		Streams:     genericiooptions.IOStreams{In: strings.NewReader(""), Out: io.Discard, ErrOut: io.Discard},
		Getenv:      func(string) string { return "" },
		DisplayName: plugins.StandaloneDisplayName,
	}
	root := commands.NewRootCommand(g)
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.InitDefaultHelpFlag()
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	return root
}

// words are a command line's words after the program's name, up to the
// first shell operator.
func words(line string) []string {
	var out []string
	for _, w := range strings.Fields(line) {
		// An ellipsis elides the rest of the line.
		if slices.Contains([]string{"|", "||", "&&", ";", ">", "2>", "&", "#", "…", "..."}, w) {
			break
		}
		out = append(out, strings.Trim(w, `"'`))
	}
	for _, prefix := range [][]string{{"go", "run", "./cmd/shardctl"}, {"kubectl", "shard"}, {"shardctl"}} {
		if len(out) >= len(prefix) && slices.Equal(out[:len(prefix)], prefix) {
			return out[len(prefix):]
		}
	}
	return nil
}

var (
	codeSpan    = regexp.MustCompile("`([^`\n]+)`")
	ourCommand  = regexp.MustCompile(`^(shardctl|kubectl shard|go run ./cmd/shardctl)( |$)`)
	flagMention = regexp.MustCompile(`^--[a-zA-Z][a-zA-Z0-9-]*`)
)

// notOurs are shardctl command lines the docs show that are not built-in
// commands, and why.
var notOurs = map[string]string{
	"shardctl NAME …":  "how a plugin shardctl-NAME runs",
	"shardctl a b":     "the plugin lookup order (shardctl-a-b, then shardctl-a)",
	"shardctl foo-bar": "the command a plugin named shardctl-foo_bar gives",
}

// mention is a shardctl command line, or a lone flag, a document names.
type mention struct {
	where string
	text  string
}

func mentions(t *testing.T) (cmds, flags []mention) {
	for _, file := range docFiles(t) {
		fences, prose := split(t, file)
		for _, f := range fences {
			if !isShell(f.lang) {
				continue
			}
			for _, l := range commandLines(f.body) {
				if ourCommand.MatchString(l) {
					cmds = append(cmds, mention{f.String(), l})
				}
			}
		}
		for _, m := range codeSpan.FindAllStringSubmatch(prose, -1) {
			span := strings.TrimSpace(m[1])
			switch {
			case ourCommand.MatchString(span):
				cmds = append(cmds, mention{filepath.Base(file), span})
			case flagMention.MatchString(span):
				flags = append(flags, mention{filepath.Base(file), flagMention.FindString(span)})
			}
		}
	}
	return cmds, flags
}

// lookupFlag finds a flag (--name or -x) that c's help shows.
func lookupFlag(c *cobra.Command, arg string) *pflag.Flag {
	name, _, _ := strings.Cut(arg, "=")
	var f *pflag.Flag
	if long, ok := strings.CutPrefix(name, "--"); ok {
		if f = c.Flags().Lookup(long); f == nil {
			f = c.InheritedFlags().Lookup(long)
		}
	} else if short := strings.TrimPrefix(name, "-"); len(short) == 1 {
		if f = c.Flags().ShorthandLookup(short); f == nil {
			f = c.InheritedFlags().ShorthandLookup(short)
		}
	}
	if f != nil && f.Hidden {
		return nil
	}
	return f
}

func TestDocsFlagsExist(t *testing.T) {
	root := newRoot()
	cmds, flags := mentions(t)
	if len(cmds) < 10 {
		t.Fatalf("found only %d command lines in the docs: the parser is broken", len(cmds))
	}
	shown := map[string]bool{}
	for _, m := range cmds {
		if _, ok := notOurs[m.text]; ok {
			shown[m.text] = true
			continue
		}
		ws := words(m.text)
		c, rest, err := root.Find(ws)
		if err != nil || (c == root && len(ws) > 0 && !strings.HasPrefix(ws[0], "-")) {
			t.Errorf("%s: `%s`: no such command (%v)", m.where, m.text, err)
			continue
		}
		for _, w := range rest {
			if !strings.HasPrefix(w, "-") || w == "-" {
				continue
			}
			if lookupFlag(c, w) == nil {
				t.Errorf("%s: `%s`: %q has no flag %s (see %s --help)", m.where, m.text, c.CommandPath(), w, c.CommandPath())
			}
		}
	}
	for text := range notOurs {
		if !shown[text] {
			t.Errorf("notOurs names a command line no document shows any more: %q", text)
		}
	}
	// A flag named on its own exists on some command.
	all := map[string]bool{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, fs := range []*pflag.FlagSet{c.Flags(), c.InheritedFlags()} {
			fs.VisitAll(func(f *pflag.Flag) {
				if !f.Hidden {
					all["--"+f.Name] = true
					if f.Shorthand != "" {
						all["-"+f.Shorthand] = true
					}
				}
			})
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	for _, m := range flags {
		if !all[m.text] {
			t.Errorf("%s: `%s`: no shardctl command has this flag", m.where, m.text)
		}
	}
}

// The README's command list is what `shardctl --help` prints.
func TestDocsCommandList(t *testing.T) {
	r := runBin(t, bin, baseEnv(), "", "--help")
	if r.code != 0 {
		t.Fatalf("--help: exit %d: %s", r.code, r.stderr)
	}
	help := r.stdout[strings.Index(r.stdout, "Runtimes:"):]
	help = help[:strings.Index(help, "\nFlags:")]
	readme := readDoc(t, filepath.Join(repoRoot, "README.md"))
	const intro = "`shardctl --help` today:\n\n```\n"
	i := strings.Index(readme, intro)
	if i < 0 {
		t.Fatalf("README.md lacks %q", intro)
	}
	listed := readme[i+len(intro):]
	listed = listed[:strings.Index(listed, "```")]
	if strings.TrimSpace(listed) != strings.TrimSpace(help) {
		t.Errorf("README.md's command list differs from shardctl --help; paste this:\n%s", strings.TrimSpace(help))
	}
}

// The README quotes the advisor's rule as signals.Thresholds states it.
func TestDocsQuoteTheThresholds(t *testing.T) {
	want := strings.Join(strings.Fields(signals.DefaultThresholds().Levels()), " ")
	// Quoted as a block quote: the "> " of each line is not the text.
	quoted := regexp.MustCompile(`(?m)^> `).ReplaceAllString(readDoc(t, filepath.Join(repoRoot, "README.md")), "")
	readme := strings.Join(strings.Fields(quoted), " ")
	if !strings.Contains(readme, want) {
		t.Errorf("README.md does not quote the advisor's rule as the code states it; it should say:\n%s", want)
	}
}

// docField is one documented JSON field.
type docField struct {
	path     string // e.g. shards[].lastError
	object   bool   // documented as an object
	optional bool   // "absent" when …
}

var backticked = regexp.MustCompile("`([^`]+)`")

// outputSections reads docs/output.md: for each section (by the command
// its heading names first), the fields of its field tables.
func outputSections(t *testing.T) map[string][]docField {
	sections := map[string][]docField{}
	var title string
	var prefixes []string
	inTable := false
	for _, line := range strings.Split(readDoc(t, filepath.Join(repoRoot, "docs", "output.md")), "\n") {
		if h, ok := strings.CutPrefix(line, "## "); ok {
			title = ""
			if m := backticked.FindStringSubmatch(h); m != nil {
				title = m[1]
			}
			inTable = false
			continue
		}
		if !strings.HasPrefix(line, "|") {
			inTable = false
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		first := strings.TrimSpace(cells[0])
		if !inTable {
			// A table of fields has "field" first in its header; "field of
			// `a` and `b[]`" puts every row under a and under b[].
			inTable = strings.HasPrefix(first, "field")
			prefixes = []string{""}
			if inTable {
				if ps := backticked.FindAllStringSubmatch(first, -1); len(ps) > 0 {
					prefixes = nil
					for _, p := range ps {
						prefixes = append(prefixes, p[1]+".")
					}
				}
			}
			continue
		}
		if strings.HasPrefix(first, "---") || len(cells) < 3 {
			continue
		}
		names := backticked.FindAllStringSubmatch(first, -1)
		if len(names) == 0 {
			t.Errorf("output.md, %s: a field row without a `name`: %s", title, line)
			continue
		}
		head := names[0][1]
		parent := ""
		if i := strings.LastIndexAny(head, ".]"); i >= 0 {
			parent = head[:i+1]
		}
		typ, meaning := cells[1], cells[2]
		for i, n := range names {
			// A second name in a cell is a sibling of the first, unless it
			// spells its own path.
			name := n[1]
			if i > 0 && !strings.ContainsAny(name, ".[") {
				name = parent + name
			}
			for _, p := range prefixes {
				sections[title] = append(sections[title], docField{path: p + name,
					object: strings.Contains(typ, "object"), optional: strings.Contains(meaning, "absent")})
			}
		}
	}
	return sections
}

// jsonPaths lists every path in a JSON document: objects by key, the
// objects in an array as [].
func jsonPaths(v any, prefix string, out map[string]bool) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			p := k
			if prefix != "" {
				p = prefix + "." + k
			}
			out[p] = true
			jsonPaths(e, p, out)
		}
	case []any:
		// An array of values is one field (string[], number[]); an array of
		// objects has fields of its own.
		for _, e := range x {
			if _, isObject := e.(map[string]any); !isObject {
				continue
			}
			out[prefix+"[]"] = true
			jsonPaths(e, prefix+"[]", out)
		}
	}
}

// compareFields reports the printed fields the docs lack and the
// documented fields nothing printed (unless documented as absent at
// times).
func compareFields(doc []docField, docs []any) (undocumented, missing []string) {
	printed := map[string]bool{}
	for _, d := range docs {
		jsonPaths(d, "", printed)
	}
	documented := map[string]docField{}
	for _, f := range doc {
		documented[f.path] = f
	}
	under := func(p, parent string) bool {
		return strings.HasPrefix(p, parent+".") || strings.HasPrefix(p, parent+"[]")
	}
	// An object documented without fields of its own is opaque (metadata).
	var opaque []string
	for _, f := range doc {
		if !f.object {
			continue
		}
		has := false
		for p := range documented {
			has = has || under(p, f.path)
		}
		if !has {
			opaque = append(opaque, f.path)
		}
	}
	for p := range printed {
		if _, ok := documented[p]; ok || slices.ContainsFunc(opaque, func(o string) bool { return under(p, o) }) {
			continue
		}
		container := false
		for d := range documented {
			container = container || under(d, p)
		}
		if !container {
			undocumented = append(undocumented, p)
		}
	}
	for p, f := range documented {
		if !printed[p] && !f.optional {
			missing = append(missing, p)
		}
	}
	slices.Sort(undocumented)
	slices.Sort(missing)
	return undocumented, missing
}

// TestDocsOutputFields runs every command docs/output.md documents and
// compares the fields it prints with the tables.
func TestDocsOutputFields(t *testing.T) {
	t.Parallel()
	sections := outputSections(t)
	jsonOf := func(t *testing.T, r result) any {
		t.Helper()
		if r.code != 0 {
			t.Fatalf("exit %d: %s", r.code, r.stderr)
		}
		var v any
		if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
			t.Fatalf("not JSON: %v\n%s", err, r.stdout)
		}
		return v
	}
	getJSON := func(t *testing.T, url string) any {
		t.Helper()
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var v any
		if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
		return v
	}

	// The pieces: a registry, two simulators registered as shards (one
	// drained), a proxy following the registry.
	reg := proctest.Start(t, bin, nil, "registry", "serve", "--listen", "127.0.0.1:0")
	regURL := "http://" + reg.Addr + "/eureka"
	var simMetrics []string
	for _, id := range []string{"blue-1", "blue-2"} {
		s := proctest.Start(t, bin, nil, "sim", "serve", "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0",
			"--register", regURL, "--shard-id", id, "--pool", "blue")
		simMetrics = append(simMetrics, strings.TrimSuffix(s.Line(t, "metrics on "), "/metrics"))
		s.Line(t, "registered as shard ")
	}
	green := proctest.Start(t, bin, nil, "sim", "serve", "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0",
		"--register", regURL, "--shard-id", "green-1", "--pool", "green", "--status", "OUT_OF_SERVICE")
	green.Line(t, "registered as shard ")
	withRegistry := append(baseEnv(), "SHARDCTL_REGISTRY="+regURL)
	jsonOf(t, runBin(t, bin, withRegistry, "", "shards", "drain", "blue-2", "-o", "json"))
	px := proctest.Start(t, bin, nil, "proxy", "serve", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--registry", regURL)
	admin := strings.TrimSuffix(px.Line(t, "admin on "), "/shards")
	budget.Eventually(t, 10*time.Second, "the proxy to follow the three shards", func() bool {
		var doc struct{ Shards []any }
		b, _ := json.Marshal(getJSON(t, admin+"/shards"))
		return json.Unmarshal(b, &doc) == nil && len(doc.Shards) == 3
	})
	plugDir := t.TempDir()
	writeExec(t, plugDir, "shardctl-hello", "exit 0")
	// A cluster for the cutover's Kubernetes side: after blue-to-green, a
	// cutover back in --mode k8s that stops at its clients step (the
	// rollouts never complete), so its plan, events and status show every
	// Kubernetes field.
	kc := newCluster(t)
	k8s := func(args ...string) []string {
		return append(args, "--name", "green-to-blue", "--from", "green", "--to", "blue", "--mode", "k8s", "--kubeconfig", kc.kubeconfig,
			"--service", "zeebe", "--selector", "app.kubernetes.io/name=shardctl-proxy",
			"--configmap", "zeebe-client", "--key", "ZEEBE_ADDRESS", "--value", "shardctl-proxy:26500", "--restart", "deploy/workers", "-o", "json")
	}

	producers := map[string]func(t *testing.T) []any{
		"shardctl version": func(t *testing.T) []any {
			return []any{jsonOf(t, runBin(t, bin, baseEnv(), "", "version", "-o", "json"))}
		},
		"shardctl plugin list": func(t *testing.T) []any {
			return []any{jsonOf(t, runBin(t, bin, baseEnv(plugDir), "", "plugin", "list", "-o", "json"))}
		},
		"shardctl plugin install-kubectl": func(t *testing.T) []any {
			return []any{jsonOf(t, runBin(t, bin, baseEnv(), "", "plugin", "install-kubectl", "--dir", t.TempDir(), "-o", "json"))}
		},
		"shardctl sim serve": func(t *testing.T) []any {
			resp, err := http.Post(simMetrics[0]+"/fault/pause?duration=1s", "", nil)
			if err != nil {
				t.Fatal(err)
			}
			var paused any
			err = json.NewDecoder(resp.Body).Decode(&paused)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			return []any{paused, getJSON(t, simMetrics[1]+"/fault")}
		},
		"shardctl proxy serve": func(t *testing.T) []any { return []any{getJSON(t, admin+"/shards")} },
		"shardctl probe registry": func(t *testing.T) []any {
			reg := proctest.Start(t, bin, nil, "registry", "serve", "--listen", "127.0.0.1:0")
			probe := []string{"probe", "registry", "--registry", "http://" + reg.Addr + "/eureka",
				"--concurrency", "2", "--burst", "50", "--instances", "20", "--background", "20", "--duration", "1s", "--lease", "1s", "-o", "json"}
			first := runBin(t, bin, baseEnv(), "", probe...)
			base := filepath.Join(t.TempDir(), "base.json")
			if err := os.WriteFile(base, []byte(first.stdout), 0o600); err != nil {
				t.Fatal(err)
			}
			return []any{jsonOf(t, first), jsonOf(t, runBin(t, bin, baseEnv(), "", append(probe, "--baseline", base)...))}
		},
		"shardctl probe health": func(t *testing.T) []any {
			// Everything the registry lists, and the proxy it lists.
			return []any{jsonOf(t, runBin(t, bin, withRegistry, "", "probe", "health", "-o", "json"))}
		},
		"shardctl probe capacity": func(t *testing.T) []any {
			s := proctest.Start(t, bin, nil, "sim", "serve", "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0",
				"--partitions", "1", "--capacity", "100", "--degrade", "--backlog-limit", "-1")
			return []any{jsonOf(t, runBinFor(t, 2*time.Minute, bin, baseEnv(), "", "probe", "capacity", "--target", s.Addr,
				"--warmup", "1s", "--start", "80", "--step", "50%", "--stage", "2s", "-o", "json"))}
		},
		"shardctl registry serve": func(t *testing.T) []any {
			// A replica over its own etcd member: /readyz is JSON then.
			r := proctest.Start(t, bin, nil, "registry", "serve", "--listen", "127.0.0.1:0", "--id", "r1",
				"--embedded-etcd", t.TempDir(), "--etcd-client-url", "http://127.0.0.1:0",
				"--etcd-peer-url", fmt.Sprintf("http://127.0.0.1:%d", proctest.FreePort(t)))
			var ready any
			budget.Eventually(t, 30*time.Second, "the replica ready", func() bool {
				resp, err := http.Get("http://" + r.Addr + "/readyz")
				if err != nil {
					return false
				}
				defer resp.Body.Close()
				return resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(&ready) == nil
			})
			return []any{ready}
		},
		"shardctl shards list": func(t *testing.T) []any {
			return []any{jsonOf(t, runBin(t, bin, withRegistry, "", "shards", "list", "-o", "json"))}
		},
		"shardctl drain": func(t *testing.T) []any {
			return jsonLines(t, runBin(t, bin, withRegistry, "", "drain", "blue-1", "--wait", "--poll", "100ms", "-o", "json"))
		},
		// Run in the order of their titles: apply, then plan (of a cutover
		// done), then status.
		"shardctl cutover apply": func(t *testing.T) []any {
			docs := jsonLines(t, runBinFor(t, budget.Of(2*time.Minute), bin, withRegistry, "", "cutover", "apply", "--from", "blue", "--to", "green",
				"--steps", "100", "--step-pause", "1s", "--gate-window", "30s", "--poll", "100ms", "--yes", "-o", "json"))
			stopped := runBinFor(t, budget.Of(2*time.Minute), bin, withRegistry, "", k8s("cutover", "apply", "--steps", "100", "--gate-window", "30s",
				"--rollout-timeout", "1s", "--yes")...)
			if stopped.code != 4 {
				t.Fatalf("a k8s apply whose rollout never completes: exit %d, want 4: %s", stopped.code, stopped.stderr)
			}
			stopped.code = 0
			return append(docs, jsonLines(t, stopped)...)
		},
		"shardctl cutover plan": func(t *testing.T) []any {
			return []any{jsonOf(t, runBin(t, bin, withRegistry, "", "cutover", "plan", "--from", "blue", "--to", "green", "-o", "json")),
				jsonOf(t, runBin(t, bin, withRegistry, "", k8s("cutover", "plan")...)),
				jsonOf(t, runBin(t, bin, withRegistry, "", k8s("cutover", "apply", "--dry-run=server")...))}
		},
		"shardctl cutover status": func(t *testing.T) []any {
			return []any{jsonOf(t, runBin(t, bin, withRegistry, "", "cutover", "status", "blue-to-green", "-o", "json")),
				jsonOf(t, runBin(t, bin, withRegistry, "", "cutover", "status", "green-to-blue", "-o", "json", "--kubeconfig", kc.kubeconfig))}
		},
		"shardctl migrate locks": func(t *testing.T) []any {
			// One run that takes the lock beside a session it does not
			// conflict with, one that a session holding a lock refuses.
			pg := startShop(t, 0)
			holdLock(t, pg, "BEGIN", "LOCK TABLE payments IN SHARE MODE")
			env := append(baseEnv(), "PGPASSWORD="+migratePassword)
			locks := []string{"migrate", "locks", "--dsn", pg.DSN("app", "", "shop"), "--table", "orders,payments", "--lock-timeout", "300ms", "-o", "json"}
			taken := jsonOf(t, runBin(t, bin, env, "", append(locks, "--mode", "access-share")...))
			refused := runBin(t, bin, env, "", locks...)
			if refused.code != 3 {
				t.Fatalf("a held table: exit %d, want 3: %s", refused.code, refused.stderr)
			}
			refused.code = 0
			return []any{taken, jsonOf(t, refused)}
		},
		"shardctl signals": func(t *testing.T) []any {
			var args []string
			for i, m := range simMetrics {
				args = append(args, "--scrape", fmt.Sprintf("s%d=%s/metrics", i, m))
			}
			return []any{jsonOf(t, runBin(t, bin, baseEnv(), "", append([]string{"signals", "--sample", "3s", "-o", "json"}, args...)...))}
		},
	}
	for _, title := range slices.Sorted(maps.Keys(sections)) {
		fields := sections[title]
		if len(fields) == 0 {
			continue
		}
		produce, ok := producers[title]
		if !ok {
			t.Errorf("output.md documents fields of %q, and this test does not run it: add it to producers", title)
			continue
		}
		t.Run(title, func(t *testing.T) {
			undocumented, missing := compareFields(fields, produce(t))
			for _, p := range undocumented {
				t.Errorf("%s prints %s; docs/output.md does not list it", title, p)
			}
			for _, p := range missing {
				t.Errorf("docs/output.md lists %s; %s did not print it (if it is absent at times, say so)", p, title)
			}
		})
	}
	for title := range producers {
		if len(sections[title]) == 0 {
			t.Errorf("producers has %q, and output.md documents no fields under that title", title)
		}
	}
}

// jsonLines reads a command's JSON lines, one document each.
func jsonLines(t *testing.T, r result) []any {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("exit %d: %s\n%s", r.code, r.stderr, r.stdout)
	}
	var docs []any
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		var v any
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			t.Fatalf("not JSON lines: %v\n%s", err, r.stdout)
		}
		docs = append(docs, v)
	}
	return docs
}

// The field comparison itself: a renamed field shows on both sides.
func TestCompareFields(t *testing.T) {
	doc := []docField{{path: "a"}, {path: "s[].id"}, {path: "s[].err", optional: true}, {path: "s[].meta", object: true}, {path: "o", object: true}, {path: "o.x"}}
	for _, tc := range []struct {
		name                  string
		json                  string
		undocumented, missing []string
	}{
		{"as documented", `{"a":1,"s":[{"id":"x","meta":{"k":"v"}}],"o":{"x":1}}`, nil, nil},
		{"optional present", `{"a":1,"s":[{"id":"x","err":"e","meta":{}}],"o":{"x":1}}`, nil, nil},
		{"renamed", `{"a":1,"s":[{"ident":"x","meta":{}}],"o":{"x":1}}`, []string{"s[].ident"}, []string{"s[].id"}},
		{"new field in a documented object", `{"a":1,"s":[{"id":"x","meta":{}}],"o":{"x":1,"y":2}}`, []string{"o.y"}, nil},
	} {
		var v any
		if err := json.Unmarshal([]byte(tc.json), &v); err != nil {
			t.Fatal(err)
		}
		u, m := compareFields(doc, []any{v})
		if !slices.Equal(u, tc.undocumented) || !slices.Equal(m, tc.missing) {
			t.Errorf("%s: undocumented %q missing %q; want %q and %q", tc.name, u, m, tc.undocumented, tc.missing)
		}
	}
}

// Pins down the block reader, since everything above trusts it.
func TestCommandLines(t *testing.T) {
	got := commandLines("# a comment\nshardctl sim serve --listen 127.0.0.1:1 \\\n    --register http://x &\n\nshardctl signals   # exit 3\n")
	want := []string{"shardctl sim serve --listen 127.0.0.1:1 --register http://x &", "shardctl signals"}
	if !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
	if w := words(`go run ./cmd/shardctl demo --no-tui | jq .`); !slices.Equal(w, []string{"demo", "--no-tui"}) {
		t.Errorf("words: %q", w)
	}
}

// helpTexts are every command's help as a user reads it: its long text,
// its examples and its flags' lines, by where they are.
func helpTexts(root *cobra.Command) map[string]string {
	out := map[string]string{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		path := c.CommandPath()
		out[path+" (long)"] = c.Long
		out[path+" (examples)"] = c.Example
		c.LocalFlags().VisitAll(func(fl *pflag.Flag) { out[path+" --"+fl.Name] = fl.Usage })
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	return out
}

// fileInHelp is a document or a repository path named in help text: a
// .md file, or a path into the repository's folders.
var fileInHelp = regexp.MustCompile(`[\w./-]*\.md\b|\.\./[\w./-]+|\b(?:docs|scripts|internal|probes|migrate)/[\w./-]+`)

// Help is read where the repository is not: it names no file the
// repository does not have, and each flag's line stays a line.
func TestHelpStandsOnItsOwn(t *testing.T) {
	const longestFlagLine = 160
	for where, text := range helpTexts(newRoot()) {
		for _, name := range fileInHelp.FindAllString(text, -1) {
			if _, err := os.Stat(filepath.Join(repoRoot, name)); err != nil || strings.HasPrefix(name, "../") {
				t.Errorf("%s names %q, which is not in the repository", where, name)
			}
		}
		if strings.Contains(where, " --") && len([]rune(text)) > longestFlagLine {
			t.Errorf("%s: a flag's help of %d characters (at most %d; say the rest in the command's long help)", where, len([]rune(text)), longestFlagLine)
		}
	}
}
