package proctest

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
)

func TestMain(m *testing.M) { os.Exit(Main(m)) }

// envLeak makes TestLeakCheck's child leave a goroutine running.
const envLeak = "PROCTEST_LEAK_A_GOROUTINE"

func TestLeakCheck(t *testing.T) {
	if os.Getenv(envLeak) == "1" {
		never := make(chan struct{})
		go leakedWorker(never)
		return
	}
	if os.Getenv(envLeak) == "0" {
		return
	}
	tests := []struct {
		name     string
		leak     string
		wantCode int
		wantOut  []string
	}{
		{"a goroutine left running fails the package", "1", 1, []string{"goroutines still running after the tests ended", "proctest.leakedWorker"}},
		{"nothing left running passes", "0", 0, []string{"PASS"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestLeakCheck$", "-test.count=1")
			cmd.Env = append(os.Environ(), envLeak+"="+tt.leak)
			out, err := cmd.CombinedOutput()
			code := 0
			if exit := (*exec.ExitError)(nil); errors.As(err, &exit) {
				code = exit.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tt.wantCode {
				t.Errorf("exit code %d, want %d; output:\n%s", code, tt.wantCode, out)
			}
			for _, want := range tt.wantOut {
				if !strings.Contains(string(out), want) {
					t.Errorf("output lacks %q:\n%s", want, out)
				}
			}
		})
	}
}

func leakedWorker(never chan struct{}) { <-never }
