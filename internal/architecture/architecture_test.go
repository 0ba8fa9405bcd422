package architecture

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/budget"
)

const module = "github.com/shardctl/shardctl/"

// A rule limits the arrows out of the packages From names. Names are
// module-relative; "x/..." is x and everything below it.
type rule struct {
	why  string
	from []string
	// never may not be reached at all: not directly, not through another
	// package (go list's Deps).
	never []string
	// only, when set, lists every module package that may be imported
	// directly; the standard library and other modules are not limited.
	only []string
	// except are From packages the rule does not hold for, allow the
	// packages under never that may still be reached.
	except, allow []string
}

var (
	runtimes = []string{"internal/proxy/...", "internal/registry/...", "internal/sim/..."}
	// model packages: types and arithmetic every room shares, with no
	// runtime, no network client and no terminal behind them.
	model = []string{"internal/signals", "internal/human", "internal/keyslot", "internal/proxy/proxyapi"}
	tools = []string{"probes/...", "commands/...", "tui/...", "migrate/...", "plugins/...", "completions/..."}
	// api packages: what a reader of a runtime needs (its wire types and
	// its client), with no runtime behind them.
	api = []string{"internal/proxy/proxyapi", "internal/registry/registryapi", "internal/registry/registryclient"}
)

var rules = []rule{
	{why: "a runtime never links the tools that operate it", from: runtimes, never: tools},
	{why: "the TUI renders the model and queries nothing itself", from: []string{"tui/..."}, only: model},
	{why: "the model is shared by every room and so depends on none", from: model, only: []string{"internal/human"}},
	{why: "the tools read a runtime through its api packages and link none", from: []string{"probes/...", "migrate/...", "tui/..."},
		never: runtimes, allow: api},
	{why: "an api package has no runtime behind it", from: api, never: runtimes, allow: api},
	{why: "the REST gateway serves any gateway server and knows none of them",
		from: []string{"internal/restgateway"}, never: append([]string{"internal/proxy/...", "internal/sim/..."}, tools...)},
	{why: "the routing core is the same under every front", from: []string{"internal/proxy/route/..."},
		never: []string{"internal/proxy", "internal/proxy/framefront/...", "internal/proxy/grpcfront/..."}},
	{why: "the frame front falls back on the gRPC front, not the other way", from: []string{"internal/proxy/grpcfront/..."},
		never: []string{"internal/proxy", "internal/proxy/framefront/..."}},
	{why: "a verb group's commands share only cmdutil and output (the demo shows observe's dashboard)",
		from:  []string{"commands/cmdutil/...", "commands/shards/...", "commands/cutover/...", "commands/observe/...", "commands/probe/..."},
		never: []string{"commands/..."}, allow: []string{"commands/cmdutil", "commands/output"}},
	{why: "a verb group's commands share only cmdutil and output (the demo shows observe's dashboard)",
		from: []string{"commands/serve/..."}, never: []string{"commands/..."}, allow: []string{"commands/cmdutil", "commands/output", "commands/observe"}},
	{why: "only main builds the command tree", from: []string{"..."}, never: []string{"commands/..."},
		except: []string{"cmd/shardctl", "commands/..."}},
}

// pkg is one package of the module as go list sees it, its imports and
// deps cut down to the module's own packages, module-relative.
type pkg struct {
	path    string
	imports []string
	deps    []string
}

func matches(pattern, path string) bool {
	if pattern == "..." {
		return true
	}
	if tree, ok := strings.CutSuffix(pattern, "/..."); ok {
		return path == tree || strings.HasPrefix(path, tree+"/")
	}
	return path == pattern
}

func matchesAny(patterns []string, path string) bool {
	return slices.ContainsFunc(patterns, func(p string) bool { return matches(p, path) })
}

// violations lists every arrow the rules forbid, one line each, naming
// the rule it breaks.
func violations(pkgs []pkg, rules []rule) []string {
	var out []string
	for _, r := range rules {
		for _, p := range pkgs {
			if !matchesAny(r.from, p.path) || matchesAny(r.except, p.path) {
				continue
			}
			for _, d := range p.deps {
				if matchesAny(r.never, d) && !matchesAny(r.allow, d) {
					how := "through " + strings.Join(pathTo(pkgs, p.path, d), " -> ")
					out = append(out, fmt.Sprintf("%s imports %s (%s): %s", p.path, d, how, r.why))
				}
			}
			if r.only == nil {
				continue
			}
			for _, d := range p.imports {
				if !matchesAny(r.only, d) {
					out = append(out, fmt.Sprintf("%s imports %s: %s", p.path, d, r.why))
				}
			}
		}
	}
	return out
}

// pathTo is one chain of imports from one package to another, for the
// message: the arrow to remove is somewhere on it.
func pathTo(pkgs []pkg, from, to string) []string {
	byPath := map[string]pkg{}
	for _, p := range pkgs {
		byPath[p.path] = p
	}
	prev := map[string]string{from: ""}
	queue := []string{from}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		if cur == to {
			var chain []string
			for at := to; at != ""; at = prev[at] {
				chain = append([]string{at}, chain...)
			}
			return chain
		}
		for _, next := range byPath[cur].imports {
			if _, seen := prev[next]; !seen {
				prev[next] = cur
				queue = append(queue, next)
			}
		}
	}
	return []string{from, "?", to}
}

// graph lists the module's packages with go list. Test files are left
// out: a runtime's tests may start the tools that operate it.
//
// Both tests read one graph: go list and the reads of every source run
// once per test binary.
func graph(t *testing.T) []pkg {
	t.Helper()
	pkgs, err := loadGraph()
	if err != nil {
		t.Fatal(err)
	}
	return pkgs
}

var loadGraph = sync.OnceValues(func() ([]pkg, error) {
	ctx, cancel := context.WithTimeout(context.Background(), budget.Of(2*time.Minute))
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "list", "-f", "{{.ImportPath}}\t{{join .Imports \" \"}}\t{{join .Deps \" \"}}\t{{.Dir}}\t{{join .GoFiles \" \"}}", module+"...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %v\n%s", err, stderr.String())
	}
	own := func(list string) []string {
		var paths []string
		for _, p := range strings.Fields(list) {
			if rel, ok := strings.CutPrefix(p, module); ok {
				paths = append(paths, rel)
			}
		}
		return paths
	}
	var pkgs []pkg
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		fields := strings.Split(sc.Text(), "\t")
		if len(fields) != 5 {
			return nil, fmt.Errorf("go list printed %q: want path, imports, deps, folder and files", sc.Text())
		}
		if err := readSources(fields[3], strings.Fields(fields[4])); err != nil {
			return nil, err
		}
		path, _ := strings.CutPrefix(fields[0], module)
		pkgs = append(pkgs, pkg{path: path, imports: own(fields[1]), deps: own(fields[2])})
	}
	return pkgs, nil
})

// readSources reads a package's folder and files in the test's own
// process: go test caches a result by what the test read, and go list's
// reads are not the test's. Without this a wrong import passes from the
// cache.
func readSources(dir string, files []string) error {
	if _, err := os.ReadDir(dir); err != nil {
		return err
	}
	for _, f := range files {
		if _, err := os.ReadFile(filepath.Join(dir, f)); err != nil {
			return err
		}
	}
	return nil
}

func TestImportGraph(t *testing.T) {
	pkgs := graph(t)
	// A rule that matches nothing checks nothing: every pattern a rule
	// names must still name a package.
	for _, r := range rules {
		for _, p := range slices.Concat(r.from, r.never, r.only, r.except, r.allow) {
			if !slices.ContainsFunc(pkgs, func(k pkg) bool { return matches(p, k.path) }) {
				t.Errorf("rule %q names %s, which matches no package: the map moved, update the rule", r.why, p)
			}
		}
	}
	for _, v := range violations(pkgs, rules) {
		t.Error(v)
	}
}

// TestViolations runs the rules over made-up graphs, so a rule that could
// not fail is caught here rather than by a wrong import that got through.
func TestViolations(t *testing.T) {
	tests := []struct {
		name string
		pkgs []pkg
		want []string
	}{
		{"clean", []pkg{
			{path: "internal/proxy", imports: []string{"internal/signals"}, deps: []string{"internal/signals", "internal/human"}},
			{path: "tui", imports: []string{"internal/signals", "internal/human"}, deps: []string{"internal/signals", "internal/human"}},
			{path: "cmd/shardctl", imports: []string{"commands"}, deps: []string{"commands", "tui"}},
			{path: "commands", imports: []string{"commands/output"}, deps: []string{"commands/output"}},
		}, nil},
		{"a runtime links a probe through another package", []pkg{
			{path: "internal/proxy/route", imports: []string{"internal/demo"}, deps: []string{"internal/demo", "probes/health"}},
			{path: "internal/demo", imports: []string{"probes/health"}, deps: []string{"probes/health"}},
		}, []string{"internal/proxy/route imports probes/health (through internal/proxy/route -> internal/demo -> probes/health)"}},
		{"the simulator imports migrate", []pkg{
			{path: "internal/sim", imports: []string{"migrate"}, deps: []string{"migrate"}},
		}, []string{"internal/sim imports migrate ("}},
		{"the TUI imports a source", []pkg{
			{path: "tui", imports: []string{"internal/source"}, deps: []string{"internal/source"}},
		}, []string{"tui imports internal/source: the TUI"}},
		{"the model imports a runtime", []pkg{
			{path: "internal/signals", imports: []string{"internal/registry"}, deps: []string{"internal/registry"}},
		}, []string{"internal/signals imports internal/registry: the model"}},
		{"a probe links the registry runtime through its client", []pkg{
			{path: "probes/health", imports: []string{"internal/registry/registryclient"}, deps: []string{"internal/registry/registryclient", "internal/registry"}},
			{path: "internal/registry/registryclient", imports: []string{"internal/registry"}, deps: []string{"internal/registry"}},
		}, []string{"probes/health imports internal/registry (through probes/health -> internal/registry/registryclient -> internal/registry)",
			"internal/registry/registryclient imports internal/registry ("}},
		{"a probe imports the commands", []pkg{
			{path: "probes/health", imports: []string{"commands/output"}, deps: []string{"commands/output"}},
		}, []string{"probes/health imports commands/output ("}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := violations(tt.pkgs, rules)
			if len(got) != len(tt.want) {
				t.Fatalf("got %d violations, want %d:\n%s", len(got), len(tt.want), strings.Join(got, "\n"))
			}
			for i, w := range tt.want {
				if !strings.HasPrefix(got[i], w) {
					t.Errorf("violation %d = %q, want it to start with %q", i, got[i], w)
				}
			}
		})
	}
}

// The map names every package, so a newcomer finds each from it: by its
// path, or as "…/name" beside its parent (the tests' helpers, the fuzz
// seeds).
func TestMapNamesEveryPackage(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range graph(t) {
		if p.path == "" {
			continue // the module root has no package
		}
		parent, name := filepath.Split(p.path)
		named := bytes.Contains(doc, []byte("`"+p.path+"`")) || bytes.Contains(doc, []byte("`"+p.path+"/`")) ||
			(parent != "" && bytes.Contains(doc, []byte("`…/"+name+"`")) && bytes.Contains(doc, []byte("`"+strings.TrimSuffix(parent, "/"))))
		if !named {
			t.Errorf("docs/architecture.md does not name %s: add it to the map", p.path)
		}
	}
}
