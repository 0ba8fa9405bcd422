package main

// End-to-end tests of the built binary as users meet it: at a shell, as
// the kubectl plugin "kubectl shard", with plugins on PATH, and completing
// words in a real bash.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/kubetest"
)

var binDir, bin string

const (
	testVersion = "v9.8.7-test"
	testCommit  = "0123456789abcdef0123456789abcdef01234567"
	testDate    = "2026-11-30T00:00:00Z"
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "shardctl-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	bin = filepath.Join(dir, "shardctl")
	pkg := "github.com/shardctl/shardctl/internal/version"
	ldflags := fmt.Sprintf("-X %[1]s.version=%[2]s -X %[1]s.commit=%[3]s -X %[1]s.date=%[4]s", pkg, testVersion, testCommit, testDate)
	build := exec.Command("go", "build", "-ldflags", ldflags, "-o", bin, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build shardctl:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := kubetest.Main(m)
	os.RemoveAll(dir)
	os.Exit(code)
}

type result struct {
	code           int
	stdout, stderr string
}

// runBin runs an executable with args and a clean environment of env,
// for budget.Of 30 s at most.
func runBin(t *testing.T, path string, env []string, stdin string, args ...string) result {
	t.Helper()
	return runCtx(t, budget.Context(t, 30*time.Second), path, env, stdin, args...)
}

// runCtx runs an executable until it ends or ctx does.
func runCtx(t *testing.T, ctx context.Context, path string, env []string, stdin string, args ...string) result {
	t.Helper()
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Env = env
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
	default:
		t.Fatalf("run %s %q: %v", path, args, err)
	}
	return result{code: cmd.ProcessState.ExitCode(), stdout: out.String(), stderr: errOut.String()}
}

// baseEnv is a minimal environment whose PATH holds dirs, then the system.
// startBin starts an executable in the background with a clean
// environment of env; it is killed when the test ends. Its stdout and
// stderr go to the buffer returned.
func startBin(t *testing.T, env []string, path string, args ...string) (*exec.Cmd, *syncBuffer) {
	t.Helper()
	cmd := exec.Command(path, args...)
	cmd.Env = env
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, out
}

func baseEnv(dirs ...string) []string {
	path := strings.Join(append(dirs, "/usr/local/bin", "/usr/bin", "/bin"), string(os.PathListSeparator))
	return []string{"PATH=" + path, "HOME=" + os.TempDir(), "KUBECONFIG=/nonexistent/kubeconfig"}
}

func writeExec(t *testing.T, dir, name, body string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
}

func TestVersionJSONFromLdflags(t *testing.T) {
	r := runBin(t, bin, baseEnv(), "", "version", "-o", "json")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	var v struct {
		Version, Commit, Date, GoVersion, Platform string
	}
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, r.stdout)
	}
	if v.Version != testVersion || v.Commit != testCommit || v.Date != testDate {
		t.Errorf("got %+v, want the -ldflags values", v)
	}
	if !strings.HasPrefix(v.GoVersion, "go1.") || !strings.Contains(v.Platform, "/") {
		t.Errorf("go version %q, platform %q", v.GoVersion, v.Platform)
	}
}

func TestPluginDispatch(t *testing.T) {
	t.Parallel()
	plugDir := t.TempDir()
	// Prints each argument in brackets, an environment variable, stdin,
	// and exits with the code given in EXIT_WITH.
	body := `printf '%s:' "$(basename "$0")"; for a in "$@"; do printf '[%s]' "$a"; done
printf '\n%s\n' "$SHARDCTL_PLUGIN_TEST"
cat >&2
exit "${EXIT_WITH:-0}"`
	writeExec(t, plugDir, "shardctl-hello", body)
	writeExec(t, plugDir, "shardctl-hello-world", body)
	writeExec(t, plugDir, "shardctl-foo_bar", body)
	writeExec(t, plugDir, "shardctl-version", "echo must never run; exit 99")

	tests := []struct {
		name     string
		args     []string
		exitWith string
		wantOut  string
		wantCode int
	}{
		{"args pass through", []string{"hello", "a b", "--flag", "-x=1", ""}, "0", "shardctl-hello:[a b][--flag][-x=1][]", 0},
		{"longest match wins", []string{"hello", "world", "again"}, "0", "shardctl-hello-world:[again]", 0},
		{"shorter match", []string{"hello", "there"}, "0", "shardctl-hello:[there]", 0},
		{"dash becomes underscore", []string{"foo-bar", "x"}, "0", "shardctl-foo_bar:[x]", 0},
		{"exit code passes through", []string{"hello"}, "7", "shardctl-hello:", 7},
		{"exit code 3 passes through", []string{"hello", "world"}, "3", "shardctl-hello-world:", 3},
		{"builtins win", []string{"version", "-o", "json"}, "0", `"version": "` + testVersion, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := append(baseEnv(plugDir), "SHARDCTL_PLUGIN_TEST=env seen", "EXIT_WITH="+tt.exitWith)
			r := runBin(t, bin, env, "from stdin", tt.args...)
			if r.code != tt.wantCode {
				t.Errorf("exit %d, want %d; stderr %q", r.code, tt.wantCode, r.stderr)
			}
			if !strings.Contains(r.stdout, tt.wantOut) {
				t.Errorf("stdout %q does not contain %q", r.stdout, tt.wantOut)
			}
			if strings.HasPrefix(tt.wantOut, "shardctl-") {
				if !strings.Contains(r.stdout, "\nenv seen\n") {
					t.Errorf("environment not passed: %q", r.stdout)
				}
				if r.stderr != "from stdin" {
					t.Errorf("stdin not passed: stderr %q", r.stderr)
				}
			}
		})
	}

	r := runBin(t, bin, baseEnv(plugDir), "", "nosuchplugin")
	if r.code != 2 || !strings.Contains(r.stderr, `unknown command "nosuchplugin"`) {
		t.Errorf("unknown name: exit %d, stderr %q", r.code, r.stderr)
	}
}

func TestKubectlPluginNaming(t *testing.T) {
	dir := t.TempDir()
	r := runBin(t, bin, baseEnv(), "", "plugin", "install-kubectl", "--dir", dir, "-o", "json")
	if r.code != 0 {
		t.Fatalf("install-kubectl: exit %d: %s", r.code, r.stderr)
	}
	if !strings.Contains(r.stderr, "is not on PATH") {
		t.Errorf("no warning that %s is not on PATH: %q", dir, r.stderr)
	}
	for _, name := range []string{"kubectl-shard", "kubectl_complete-shard"} {
		target, err := os.Readlink(filepath.Join(dir, name))
		if err != nil || target != bin {
			t.Errorf("%s -> %q, %v; want link to %s", name, target, err, bin)
		}
	}
	plugin := filepath.Join(dir, "kubectl-shard")

	help := runBin(t, plugin, baseEnv(dir), "", "--help")
	if help.code != 0 {
		t.Fatalf("kubectl-shard --help: exit %d", help.code)
	}
	for _, want := range []string{"kubectl shard runs a Zeebe", "\n  kubectl shard [command]", `Use "kubectl shard [command] --help"`} {
		if !strings.Contains(help.stdout, want) {
			t.Errorf("help lacks %q:\n%s", want, help.stdout)
		}
	}
	if strings.Contains(help.stdout, "shardctl [command]") {
		t.Errorf("plugin help still names itself shardctl:\n%s", help.stdout)
	}

	sub := runBin(t, plugin, baseEnv(dir), "", "version", "--help")
	if !strings.Contains(sub.stdout, "kubectl shard version") {
		t.Errorf("subcommand help: %s", sub.stdout)
	}
	// Examples and long help say the name usage says.
	for _, args := range [][]string{{"--help"}, {"cutover", "--help"}, {"cutover", "apply", "--help"}, {"drain", "--help"}} {
		h := runBin(t, plugin, baseEnv(dir), "", args...)
		if !strings.Contains(h.stdout, "  kubectl shard ") || regexp.MustCompile(`(?m)(^\s+|")shardctl [a-z]`).MatchString(h.stdout) {
			t.Errorf("kubectl shard %v: the help runs shardctl, not kubectl shard:\n%s", args, h.stdout)
		}
	}

	bad := runBin(t, plugin, baseEnv(dir), "", "frobnicate")
	if bad.code != 2 || !strings.Contains(bad.stderr, `unknown command "frobnicate" for "kubectl shard"`) || !strings.Contains(bad.stderr, "See 'kubectl shard --help' for usage.") {
		t.Errorf("error naming: exit %d, stderr %q", bad.code, bad.stderr)
	}

	// kubectl >= 1.26 runs kubectl_complete-shard with the words typed
	// after "kubectl shard" and reads cobra's __complete answer.
	comp := runBin(t, filepath.Join(dir, "kubectl_complete-shard"), baseEnv(dir), "", "ver")
	lines := strings.Split(strings.TrimSpace(comp.stdout), "\n")
	if comp.code != 0 || len(lines) < 2 || !strings.HasPrefix(lines[0], "version") || lines[len(lines)-1] != ":4" {
		t.Errorf("kubectl_complete-shard ver: exit %d, stdout %q", comp.code, comp.stdout)
	}
}

// complete asks a real bash, with bash-completion loaded and shardctl's
// script sourced, for the candidates of a partial command line.
func complete(t *testing.T, env []string, line string) []string {
	t.Helper()
	const bashCompletion = "/usr/share/bash-completion/bash_completion"
	if _, err := os.Stat(bashCompletion); err != nil {
		t.Fatalf("%s missing: install the Debian package bash-completion (scripts/test.sh does)", bashCompletion)
	}
	script := fmt.Sprintf(`
source %s
source <(shardctl completion bash)
COMP_LINE=%q
COMP_POINT=${#COMP_LINE}
read -r -a COMP_WORDS <<< "$COMP_LINE"
[[ $COMP_LINE == *" " ]] && COMP_WORDS+=("")
COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 ))
__start_shardctl shardctl "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
printf '%%s\n' "${COMPREPLY[@]}"
`, bashCompletion, line)
	cmd := exec.CommandContext(budget.Context(t, 30*time.Second), "bash", "--norc", "--noprofile", "-c", script)
	cmd.Env = env
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("bash: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("bash: %v", err)
	}
	var words []string
	for _, w := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if w = strings.TrimSpace(w); w != "" {
			words = append(words, w)
		}
	}
	return words
}

func TestBashCompletion(t *testing.T) {
	t.Parallel()
	plugDir := t.TempDir()
	writeExec(t, plugDir, "shardctl-hello", "exit 0")
	writeExec(t, plugDir, "shardctl_complete-hello", `printf 'alpha\nalright\nbeta\n:4\n'`)
	kubeconfig := filepath.Join(t.TempDir(), "config")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {}}]
contexts:
- {name: prod-eu, context: {cluster: c, user: u}}
- {name: prod-us, context: {cluster: c, user: u}}
- {name: staging, context: {cluster: c, user: u}}
current-context: staging
`), 0o600); err != nil {
		t.Fatal(err)
	}
	env := append(baseEnv(binDir, plugDir), "KUBECONFIG="+kubeconfig)

	tests := []struct {
		line string
		want []string
	}{
		{"shardctl ver", []string{"version"}},
		{"shardctl completion b", []string{"bash"}},
		{"shardctl completion ", []string{"bash", "fish", "powershell", "zsh"}},
		{"shardctl plugin ", []string{"install-kubectl", "list"}},
		{"shardctl -o y", []string{"yaml"}},
		{"shardctl version --output ", []string{"json", "table", "wide", "yaml"}},
		{"shardctl --context prod", []string{"prod-eu", "prod-us"}},
		// Plugins are offered beside built-ins, and complete their own
		// arguments through shardctl_complete-NAME.
		{"shardctl he", []string{"hello", "help"}},
		{"shardctl hello al", []string{"alpha", "alright"}},
	}
	for _, tt := range tests {
		t.Run(tt.line, func(t *testing.T) {
			got := complete(t, env, tt.line)
			slices.Sort(got)
			if !slices.Equal(got, tt.want) {
				t.Errorf("completing %q: got %q, want %q", tt.line, got, tt.want)
			}
		})
	}
}

// The quick start without a terminal: `shardctl demo --no-tui` brings up
// a registry, shards and the proxy, and prints the signals as JSON lines.
func TestDemoWithoutATerminal(t *testing.T) {
	t.Parallel()
	r := runBin(t, bin, baseEnv(), "", "demo", "--no-tui", "--duration", "12s", "--every", "5s", "--listen", "127.0.0.1:0", "-o", "json")
	if r.code != 0 {
		t.Fatalf("exit %d\nstderr: %s", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) < 2 {
		t.Fatalf("want a report every 5 s, got %d lines:\n%s\nstderr: %s", len(lines), r.stdout, r.stderr)
	}
	var report struct {
		Level  string
		Shards []struct{ Name string }
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &report); err != nil {
		t.Fatalf("last line: %v: %s", err, lines[len(lines)-1])
	}
	if report.Level != "ok" || len(report.Shards) != 3 {
		t.Errorf("steady demo: level %s, %d shards; want ok and 3", report.Level, len(report.Shards))
	}
	for _, want := range []string{"listening on 127.0.0.1:", "zbctl status --address", "shards list"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
		}
	}
	if r := runBin(t, bin, baseEnv(), "", "demo", "--listen", "127.0.0.1:0"); r.code == 0 || !strings.Contains(r.stderr, "--no-tui") {
		t.Errorf("the dashboard without a terminal: exit %d, %s", r.code, r.stderr)
	}
}
