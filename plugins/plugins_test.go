package plugins

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/budget"
)

// writeScript puts an executable shell script named name into dir.
func writeScript(t *testing.T, dir, name, body string, mode os.FileMode) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body+"\n"), mode); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestFindLongestMatch(t *testing.T) {
	dir := t.TempDir()
	ab := writeScript(t, dir, "shardctl-a-b", "exit 0", 0o755)
	a := writeScript(t, dir, "shardctl-a", "exit 0", 0o755)
	dash := writeScript(t, dir, "shardctl-foo_bar", "exit 0", 0o755)
	writeScript(t, dir, "shardctl-noexec", "exit 0", 0o644)
	f := Finder{Path: dir}

	tests := []struct {
		name     string
		args     []string
		wantPath string
		wantArgs []string
		wantErr  bool
	}{
		{"longest first", []string{"a", "b", "x"}, ab, []string{"x"}, false},
		{"falls back to shorter", []string{"a", "c", "x"}, a, []string{"c", "x"}, false},
		{"flags end the name", []string{"a", "--b", "c"}, a, []string{"--b", "c"}, false},
		{"dash in a word is an underscore", []string{"foo-bar", "-v"}, dash, []string{"-v"}, false},
		{"not executable is no plugin", []string{"noexec"}, "", nil, false},
		{"unknown", []string{"zzz"}, "", nil, false},
		{"flag first", []string{"--registry", "x", "a"}, "", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, ok, err := f.Find(tt.args)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if ok != (tt.wantPath != "") || m.Path != tt.wantPath {
				t.Fatalf("Find(%q) = %q, %v; want %q", tt.args, m.Path, ok, tt.wantPath)
			}
			if ok && !slices.Equal(m.Args, tt.wantArgs) {
				t.Errorf("args = %q, want %q", m.Args, tt.wantArgs)
			}
		})
	}
}

func TestLookupSkipsEmptyPathEntry(t *testing.T) {
	dir := t.TempDir()
	writeScript(t, dir, "shardctl-here", "exit 0", 0o755)
	t.Chdir(dir)
	if _, ok := (Finder{Path: string(os.PathListSeparator) + "/nonexistent"}).Lookup("here"); ok {
		t.Error("a plugin in the working directory ran through an empty PATH entry")
	}
}

func TestList(t *testing.T) {
	first, second := t.TempDir(), t.TempDir()
	writeScript(t, first, "shardctl-hello", "exit 0", 0o755)
	writeScript(t, second, "shardctl-hello", "exit 0", 0o755)
	writeScript(t, first, "shardctl-broken", "exit 0", 0o644)
	writeScript(t, first, "shardctl-version", "exit 0", 0o755)
	writeScript(t, first, "shardctl-foo_bar-baz", "exit 0", 0o755)
	writeScript(t, first, "not-a-plugin", "exit 0", 0o755)
	f := Finder{Path: strings.Join([]string{first, "/does/not/exist", second, first}, string(os.PathListSeparator))}
	builtin := func(words []string) bool { return words[0] == "version" }

	list, err := f.List(builtin)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for _, p := range list {
		got[p.Path] = p.Warnings
	}
	want := map[string]string{
		filepath.Join(first, "shardctl-broken"):      "not executable",
		filepath.Join(first, "shardctl-foo_bar-baz"): "",
		filepath.Join(first, "shardctl-hello"):       "",
		filepath.Join(second, "shardctl-hello"):      "overshadowed by a plugin of the same name earlier on PATH: " + filepath.Join(first, "shardctl-hello"),
		filepath.Join(first, "shardctl-version"):     `built-in command "version"`,
	}
	if len(got) != len(want) || len(list) != len(want) {
		t.Fatalf("listed %d files (%v), want %d", len(list), got, len(want))
	}
	for path, w := range want {
		warnings, ok := got[path]
		if !ok {
			t.Errorf("%s not listed", path)
			continue
		}
		if w == "" && len(warnings) != 0 {
			t.Errorf("%s: unexpected warnings %q", path, warnings)
		}
		if w != "" && (len(warnings) != 1 || !strings.Contains(warnings[0], w)) {
			t.Errorf("%s: warnings %q, want one containing %q", path, warnings, w)
		}
	}
	for _, p := range list {
		if p.Name == "shardctl-foo_bar-baz" && p.Command != "foo-bar baz" {
			t.Errorf("command of %s = %q, want %q", p.Name, p.Command, "foo-bar baz")
		}
	}
	if names := f.Names(builtin); !slices.Equal(names, []string{"foo-bar", "hello"}) {
		t.Errorf("Names = %q, want only runnable plugins' first words", names)
	}
}

func TestRun(t *testing.T) {
	dir := t.TempDir()
	script := writeScript(t, dir, "shardctl-echo", `
for a in "$@"; do printf '[%s]' "$a"; done
printf '\n%s\n' "$SHARDCTL_TEST_VALUE"
read line; echo "stdin: $line" >&2
exit 7`, 0o755)
	var out, errOut bytes.Buffer
	code, err := Run(context.Background(), script, []string{"a b", "--flag=x", ""}, []string{"SHARDCTL_TEST_VALUE=passed through"}, strings.NewReader("hello\n"), &out, &errOut)
	if err != nil {
		t.Fatal(err)
	}
	if code != 7 {
		t.Errorf("exit code = %d, want 7", code)
	}
	if want := "[a b][--flag=x][]\npassed through\n"; out.String() != want {
		t.Errorf("stdout = %q, want %q", out.String(), want)
	}
	if errOut.String() != "stdin: hello\n" {
		t.Errorf("stderr = %q", errOut.String())
	}
}

func TestRunKilledBySignal(t *testing.T) {
	dir := t.TempDir()
	script := writeScript(t, dir, "shardctl-die", "kill -TERM $$; sleep 5", 0o755)
	code, err := Run(context.Background(), script, nil, nil, nil, &bytes.Buffer{}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if code != 128+15 {
		t.Errorf("exit code = %d, want 143 (128+SIGTERM)", code)
	}
}

func TestRunRelaysCancellation(t *testing.T) {
	dir := t.TempDir()
	// The plugin says when its trap is set; cancelling before that would
	// test the shell's default SIGTERM, not the relay.
	script := writeScript(t, dir, "shardctl-wait", "trap 'exit 42' TERM; echo ready; while :; do sleep 0.05; done", 0o755)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out, stdout := io.Pipe()
	done := make(chan int, 1)
	go func() {
		code, _ := Run(ctx, script, nil, nil, nil, stdout, &bytes.Buffer{})
		stdout.Close()
		done <- code
	}()
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("the plugin's first line: %q, %v", line, err)
	}
	go io.Copy(io.Discard, out)
	cancel()
	select {
	case code := <-done:
		if code != 42 {
			t.Errorf("exit code = %d, want 42 from the plugin's TERM trap", code)
		}
	case <-time.After(budget.Of(10 * time.Second)):
		t.Fatal("plugin did not stop after cancellation")
	}
}

func TestRunMissingExecutable(t *testing.T) {
	code, err := Run(context.Background(), filepath.Join(t.TempDir(), "gone"), nil, nil, nil, &bytes.Buffer{}, &bytes.Buffer{})
	if err == nil || code != 1 {
		t.Errorf("Run(missing) = %d, %v; want 1 and an error", code, err)
	}
}

func TestInvokedAs(t *testing.T) {
	tests := map[string]Invocation{
		"shardctl":                         Standalone,
		"/usr/local/bin/shardctl":          Standalone,
		"/home/me/.krew/bin/kubectl-shard": KubectlPlugin,
		"kubectl-shard.exe":                KubectlPlugin,
		"/x/kubectl_complete-shard":        KubectlComplete,
		"kubectl-sharded":                  Standalone,
	}
	for argv0, want := range tests {
		if got := InvokedAs(argv0); got != want {
			t.Errorf("InvokedAs(%q) = %v, want %v", argv0, got, want)
		}
	}
}

func TestInstallKubectl(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "bin")
	self := writeScript(t, t.TempDir(), "shardctl", "exit 0", 0o755)

	links, err := InstallKubectl(dir, self, false)
	if err != nil {
		t.Fatal(err)
	}
	for i, name := range []string{KubectlPluginName, KubectlCompleteName} {
		path := filepath.Join(dir, name)
		if target, err := os.Readlink(path); err != nil || target != self {
			t.Errorf("%s -> %q, %v; want link to %s", name, target, err, self)
		}
		if links[i].Action != "created" {
			t.Errorf("%s: action %q, want created", name, links[i].Action)
		}
	}

	// Again: nothing to do.
	links, err = InstallKubectl(dir, self, false)
	if err != nil || links[0].Action != "unchanged" {
		t.Fatalf("second install: %v, %+v", err, links)
	}

	// A foreign file is kept unless forced.
	foreign := filepath.Join(dir, KubectlPluginName)
	os.Remove(foreign)
	writeScript(t, dir, KubectlPluginName, "echo other", 0o755)
	if _, err := InstallKubectl(dir, self, false); err == nil || !strings.Contains(err.Error(), "--force") {
		t.Errorf("want refusal naming --force, got %v", err)
	}
	if b, _ := os.ReadFile(foreign); !strings.Contains(string(b), "echo other") {
		t.Error("the foreign file was changed without --force")
	}
	links, err = InstallKubectl(dir, self, true)
	if err != nil || links[0].Action != "replaced" {
		t.Fatalf("forced install: %v, %+v", err, links)
	}
}

func TestOnPath(t *testing.T) {
	if !OnPath("/usr/bin", "/bin:/usr/bin/") {
		t.Error("/usr/bin is on /bin:/usr/bin/")
	}
	if OnPath("/opt/x", "/bin::/usr/bin") {
		t.Error("/opt/x is not on /bin::/usr/bin")
	}
}
