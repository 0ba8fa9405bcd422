package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A run as go test -json writes it: a passing and a failing test with a
// subtest, a test whose subtest ran in parallel, a package that timed out with a test still running, a line
// that is not JSON (the go command's own), and a test binary killed under
// test2json (no package event at all).
const run = `{"Action":"start","Package":"m/a"}
{"Action":"run","Package":"m/a","Test":"TestQuiet"}
{"Action":"output","Package":"m/a","Test":"TestQuiet","Output":"=== RUN   TestQuiet\n"}
{"Action":"output","Package":"m/a","Test":"TestQuiet","Output":"    a_test.go:9: chatter\n"}
{"Action":"pass","Package":"m/a","Test":"TestQuiet","Elapsed":2.5}
{"Action":"run","Package":"m/a","Test":"TestLoud"}
{"Action":"output","Package":"m/a","Test":"TestLoud","Output":"=== RUN   TestLoud\n"}
{"Action":"run","Package":"m/a","Test":"TestLoud/case"}
{"Action":"output","Package":"m/a","Test":"TestLoud/case","Output":"    a_test.go:20: want 1, got 2\n"}
{"Action":"fail","Package":"m/a","Test":"TestLoud/case","Elapsed":7}
{"Action":"output","Package":"m/a","Test":"TestLoud","Output":"--- FAIL: TestLoud (7.00s)\n"}
{"Action":"fail","Package":"m/a","Test":"TestLoud","Elapsed":7}
{"Action":"output","Package":"m/a","Output":"FAIL\n"}
{"Action":"output","Package":"m/a","Output":"FAIL\tm/a\t9.6s\n"}
{"Action":"fail","Package":"m/a","Elapsed":9.6}
{"Action":"run","Package":"m/b","Test":"TestHangs"}
{"Action":"output","Package":"m/b","Test":"TestHangs","Output":"    b_test.go:5: waiting for the shard\n"}
{"Action":"run","Package":"m/b","Test":"TestFine"}
{"Action":"pass","Package":"m/b","Test":"TestFine","Elapsed":30}
{"Action":"pass","Package":"m/b","Test":"TestPar/slow","Elapsed":12}
{"Action":"pass","Package":"m/b","Test":"TestPar","Elapsed":0}
{"Action":"output","Package":"m/b","Output":"panic: test timed out after 1m0s\n"}
{"Action":"fail","Package":"m/b","Elapsed":60}
{"Action":"skip","Package":"m/c"}
go: downloading example.com/x v1.0.0
{"Time":"2026-12-04T18:37:05.1Z","Action":"start","Package":"m/k"}
{"Time":"2026-12-04T18:37:05.1Z","Action":"run","Package":"m/k","Test":"TestSleeps"}
{"Time":"2026-12-04T18:37:05.1Z","Action":"output","Package":"m/k","Test":"TestSleeps","Output":"=== RUN   TestSleeps\n"}
{"Time":"2026-12-04T18:37:06.6Z","Action":"fail","Package":"m/k","Test":"TestSleeps","Elapsed":1.5}
`

func TestFilterShowsWhatGoTestWould(t *testing.T) {
	var show, saved bytes.Buffer
	if err := filter(strings.NewReader(run), &show, &saved, "grpc"); err != nil {
		t.Fatal(err)
	}
	got := show.String()
	for _, want := range []string{
		"want 1, got 2", "--- FAIL: TestLoud", "FAIL\tm/a\t9.6s", // a failed test's output and its package line
		"waiting for the shard", "panic: test timed out", // a test cut off by its package's end
		"go: downloading",                                                         // not JSON: passed through
		"FAIL\tm/b (grpc)\t60.000s",                                               // a package run by test2json alone: no go command said it
		"m/k: the test binary ended without a result", "FAIL\tm/k (grpc)\t1.500s", // killed
	} {
		if !strings.Contains(got, want) {
			t.Errorf("shown output lacks %q:\n%s", want, got)
		}
	}
	if n := strings.Count(got, "FAIL\tm/a"); n != 1 {
		t.Errorf("m/a's FAIL line shown %d times, want once (go test wrote it):\n%s", n, got)
	}
	for _, never := range []string{"chatter", "PASS\n"} {
		if strings.Contains(got, never) {
			t.Errorf("shown output has %q, which plain go test keeps quiet:\n%s", never, got)
		}
	}
	if n := strings.Count(saved.String(), `"Label":"grpc"`); n != 29 {
		t.Errorf("saved %d labelled events, want the 28 JSON lines read and m/k's end:\n%s", n, saved.String())
	}
}

func TestSummaryNamesSlowestTestsAndEveryPackage(t *testing.T) {
	var saved bytes.Buffer
	if err := filter(strings.NewReader(run), new(bytes.Buffer), &saved, ""); err != nil {
		t.Fatal(err)
	}
	// A second run of package m/a alone, labelled as a rerun is.
	var again strings.Builder
	for line := range strings.Lines(saved.String()) {
		if strings.Contains(line, `"Package":"m/a"`) {
			again.WriteString(strings.Replace(line, `"Package":"m/a"`, `"Package":"m/a","Label":"again"`, 1))
		}
	}
	var events []event
	for _, file := range []string{saved.String(), again.String()} {
		es, err := parse(strings.NewReader(file))
		if err != nil {
			t.Fatal(err)
		}
		events = append(events, es...)
	}
	s := summarize(events)

	tests := []struct{ name, test, action string }{
		{"m/b", "TestFine", "pass"},
		{"m/b", "TestPar", "pass"}, // 0 s itself, 12 s its parallel subtest
		{"m/a", "TestLoud", "fail"},
		{"m/a (again)", "TestLoud", "fail"},
		{"m/a", "TestQuiet", "pass"},
		{"m/a (again)", "TestQuiet", "pass"},
		{"m/k", "TestSleeps", "fail"},
	}
	if len(s.Tests) != len(tests) {
		t.Fatalf("got %d tests, want %d (top-level only): %+v", len(s.Tests), len(tests), s.Tests)
	}
	for i, want := range tests {
		if got := s.Tests[i]; got.Name != want.name || got.Test != want.test || got.Action != want.action {
			t.Errorf("slowest #%d: got %+v, want %+v", i+1, got, want)
		}
	}
	pkgs := []string{"m/b", "m/a", "m/a (again)", "m/k"} // m/c had no tests
	if len(s.Packages) != len(pkgs) {
		t.Fatalf("got packages %+v, want %v", s.Packages, pkgs)
	}
	for i, want := range pkgs {
		if s.Packages[i].Name != want {
			t.Errorf("package #%d: got %s, want %s", i+1, s.Packages[i].Name, want)
		}
	}

	durations := filepath.Join(t.TempDir(), "durations")
	if err := writeDurations(durations, s); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(durations); string(b) != "m/b 60.0\nm/a 9.6\nm/k 1.5\n" {
		t.Errorf("durations file %q: want each unlabelled package's wall time, slowest first", b)
	}

	var out bytes.Buffer
	writeSummary(&out, s, 2)
	for _, want := range []string{"the 2 slowest tests (4 passed, 3 failed, 0 skipped)", "30.0s  PASS", "60.0s  FAIL  m/b"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, out.String())
		}
	}
}
