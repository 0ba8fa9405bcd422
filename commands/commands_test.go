package commands

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/shardctl/shardctl/commands/cmdutil"
	"github.com/shardctl/shardctl/internal/version"
)

// run calls Main in-process as `shardctl args...` and returns the exit
// code, stdout and stderr.
func run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	streams, _, out, errOut := genericiooptions.NewTestIOStreams()
	code := Main(append([]string{"shardctl"}, args...), streams)
	return code, out.String(), errOut.String()
}

func TestExitCodes(t *testing.T) {
	t.Setenv("PATH", t.TempDir()) // no plugins
	tests := []struct {
		name       string
		args       []string
		wantCode   int
		wantStderr string
	}{
		{"help", []string{"--help"}, cmdutil.ExitOK, ""},
		{"bare command shows help", nil, cmdutil.ExitOK, ""},
		{"version", []string{"version"}, cmdutil.ExitOK, ""},
		{"unknown command", []string{"frobnicate"}, cmdutil.ExitUsage, `unknown command "frobnicate" for "shardctl"`},
		{"suggestion", []string{"verison"}, cmdutil.ExitUsage, "Did you mean this?"},
		{"unknown flag", []string{"version", "--frob"}, cmdutil.ExitUsage, "unknown flag: --frob"},
		{"flag without value", []string{"version", "-o"}, cmdutil.ExitUsage, "flag needs an argument"},
		{"bad output format", []string{"version", "-o", "xml"}, cmdutil.ExitUsage, "use one of table, wide, json, yaml"},
		{"extra argument", []string{"version", "now"}, cmdutil.ExitUsage, "unknown command \"now\" for \"shardctl version\""},
		{"completion without shell", []string{"completion"}, cmdutil.ExitUsage, "name one shell: bash, zsh, fish, powershell"},
		{"completion bad shell", []string{"completion", "tcsh"}, cmdutil.ExitUsage, "name one shell"},
		{"plugin without subcommand", []string{"plugin"}, cmdutil.ExitUsage, "missing subcommand"},
		{"migrate without subcommand", []string{"migrate"}, cmdutil.ExitUsage, "missing subcommand: use locks"},
		{"migrate locks without a table", []string{"migrate", "locks", "--table", " , "}, cmdutil.ExitUsage, "--table: name the tables"},
		{"name-only with json", []string{"plugin", "list", "--name-only", "-o", "json"}, cmdutil.ExitUsage, "--name-only"},
		{"flag before plugin name", []string{"--registry", "http://x", "frobnicate"}, cmdutil.ExitUsage, "unknown command"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := run(t, tt.args...)
			if code != tt.wantCode {
				t.Errorf("exit code = %d, want %d; stderr:\n%s", code, tt.wantCode, stderr)
			}
			if !strings.Contains(stderr, tt.wantStderr) {
				t.Errorf("stderr %q does not contain %q", stderr, tt.wantStderr)
			}
			if tt.wantCode == cmdutil.ExitUsage && !strings.Contains(stderr, "--help' for usage.") {
				t.Errorf("a usage error must point to --help; stderr %q", stderr)
			}
		})
	}
}

func TestCodeOf(t *testing.T) {
	tests := []struct {
		err  error
		want int
	}{
		{nil, cmdutil.ExitOK},
		{errors.New("connection refused"), cmdutil.ExitFailure},
		{cmdutil.Usagef("bad"), cmdutil.ExitUsage},
		{fmt.Errorf("wrapped: %w", cmdutil.Refused(errors.New("signals degraded"))), cmdutil.ExitRefused},
		{cmdutil.TimedOut(errors.New("drain")), cmdutil.ExitTimedOut},
		{errors.New(`required flag(s) "dsn" not set`), cmdutil.ExitUsage},
	}
	for _, tt := range tests {
		if got := cmdutil.CodeOf(tt.err); got != tt.want {
			t.Errorf("CodeOf(%v) = %d, want %d", tt.err, got, tt.want)
		}
	}
}

func TestVersionJSON(t *testing.T) {
	code, out, stderr := run(t, "version", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var got version.Info
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&got); err != nil {
		t.Fatalf("not the documented JSON: %v\n%s", err, out)
	}
	if got != version.Get() {
		t.Errorf("got %+v, want %+v", got, version.Get())
	}
	for _, field := range []string{`"version"`, `"commit"`, `"date"`, `"goVersion"`, `"platform"`} {
		if !strings.Contains(out, field) {
			t.Errorf("field %s missing from %s", field, out)
		}
	}
}

func TestPluginListJSONAndWarnings(t *testing.T) {
	dir := t.TempDir()
	for name, mode := range map[string]os.FileMode{"shardctl-hello": 0o755, "shardctl-version": 0o755, "shardctl-broken": 0o644} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"), mode); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", dir)
	code, out, stderr := run(t, "plugin", "list", "-o", "json")
	if code != cmdutil.ExitFailure {
		t.Errorf("exit %d with plugin warnings, want %d", code, cmdutil.ExitFailure)
	}
	var doc struct {
		Plugins []struct {
			Name       string   `json:"name"`
			Command    string   `json:"command"`
			Path       string   `json:"path"`
			Executable bool     `json:"executable"`
			Warnings   []string `json:"warnings"`
		} `json:"plugins"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if len(doc.Plugins) != 3 {
		t.Fatalf("listed %d plugins, want 3: %s", len(doc.Plugins), out)
	}
	warned := 0
	for _, p := range doc.Plugins {
		warned += len(p.Warnings)
	}
	if warned != 2 {
		t.Errorf("%d warnings, want 2 (not executable, built-in name): %s", warned, out)
	}
	if !strings.Contains(stderr, "2 plugin warning(s)") {
		t.Errorf("stderr %q", stderr)
	}

	// Only good plugins: table, exit 0.
	os.Remove(filepath.Join(dir, "shardctl-version"))
	os.Remove(filepath.Join(dir, "shardctl-broken"))
	code, out, stderr = run(t, "plugin", "list")
	if code != 0 || !strings.Contains(out, "COMMAND") || !strings.Contains(out, "hello") {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out, stderr)
	}
}

func TestGlobalsEnvironment(t *testing.T) {
	tests := []struct {
		flag, env, want string
	}{
		{"", "", cmdutil.DefaultRegistry},
		{"", "http://env:8761/eureka/", "http://env:8761/eureka"},
		{"http://flag/eureka", "http://env/eureka", "http://flag/eureka"},
	}
	for _, tt := range tests {
		g := &cmdutil.Globals{Registry: tt.flag, Getenv: func(k string) string {
			if k == "SHARDCTL_REGISTRY" {
				return tt.env
			}
			return ""
		}}
		if got := g.RegistryURL(); got != tt.want {
			t.Errorf("flag %q env %q: RegistryURL = %q, want %q", tt.flag, tt.env, got, tt.want)
		}
	}
}
