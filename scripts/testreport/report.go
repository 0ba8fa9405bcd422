package main

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"time"
)

// event is one line of `go test -json` (cmd/test2json), plus the label
// this tool adds when a package runs twice in one suite.
type event struct {
	Time       time.Time `json:",omitzero"`
	Action     string
	Package    string  `json:",omitempty"`
	Test       string  `json:",omitempty"`
	Elapsed    float64 `json:",omitempty"`
	Output     string  `json:",omitempty"`
	ImportPath string  `json:",omitempty"`
	Label      string  `json:",omitempty"`
}

func (e event) pkg() string {
	if e.Label == "" {
		return e.Package
	}
	return e.Package + " (" + e.Label + ")"
}

// filter prints what plain `go test` would (package lines and the output
// of failed tests), saving every event to save.
func filter(in io.Reader, show, save io.Writer, label string) error {
	held := map[[2]string]*bytes.Buffer{} // a running test's output, until it ends
	said := map[string]bool{}             // packages whose ok/FAIL line go test wrote
	started := map[string]time.Time{}     // packages that have not ended yet
	var last time.Time
	enc := json.NewEncoder(save)
	endPackage := func(e event) {
		delete(started, e.Package)
		if e.Action == "fail" {
			// A panic or a timeout ends the package with tests still
			// running: their output is what says why.
			for k, b := range held {
				if k[0] == e.Package {
					show.Write(b.Bytes())
					delete(held, k)
				}
			}
		}
		// A test binary run by test2json has no go command to say it.
		if !said[e.Package] {
			fmt.Fprintf(show, "%-4s\t%s\t%.3fs\n", map[string]string{"pass": "ok", "fail": "FAIL"}[e.Action], e.pkg(), e.Elapsed)
		}
	}
	sc := lines(in)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Action == "" {
			fmt.Fprintln(show, sc.Text()) // the go command's own words
			continue
		}
		e.Label = label
		if err := enc.Encode(e); err != nil {
			return err
		}
		if e.Time.After(last) {
			last = e.Time
		}
		key := [2]string{e.Package, e.Test}
		switch {
		case e.Action == "build-output":
			io.WriteString(show, e.Output)
		case e.Action == "start":
			started[e.Package] = e.Time
		case e.Test == "" && e.Action == "output":
			if strings.HasPrefix(e.Output, "ok  \t"+e.Package) || strings.HasPrefix(e.Output, "FAIL\t"+e.Package) {
				said[e.Package] = true
			}
			if e.Output != "PASS\n" {
				io.WriteString(show, e.Output)
			}
		case e.Test == "" && (e.Action == "pass" || e.Action == "fail"):
			endPackage(e)
		case e.Test == "":
		case e.Action == "output":
			b := held[key]
			if b == nil {
				b = new(bytes.Buffer)
				held[key] = b
			}
			b.WriteString(e.Output)
		case e.Action == "fail":
			if b := held[key]; b != nil {
				show.Write(b.Bytes())
			}
			delete(held, key)
		case e.Action == "pass" || e.Action == "skip":
			delete(held, key)
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	// A test binary killed (or one that crashed the runtime) ends with no
	// package event: it failed, and its wall time is what it ran.
	for _, pkg := range slices.Sorted(maps.Keys(started)) {
		fmt.Fprintf(show, "%s: the test binary ended without a result (killed, or it crashed)\n", pkg)
		e := event{Time: last, Action: "fail", Package: pkg, Label: label, Elapsed: last.Sub(started[pkg]).Seconds()}
		if err := enc.Encode(e); err != nil {
			return err
		}
		endPackage(e)
	}
	return nil
}

type result struct {
	Name    string // a package, or a package and a test
	Test    string
	Action  string // pass, fail or skip
	Elapsed float64
}

type summary struct {
	Tests    []result // top-level tests that ended, slowest first
	Packages []result // packages that ran tests, slowest first
	Counts   map[string]int
}

func summarize(events []event) summary {
	s := summary{Counts: map[string]int{}}
	// A test whose subtests run in parallel reports the time before they
	// ran (go test says 0.00s): its longest subtest is its cost.
	longestSub := map[[2]string]float64{}
	for _, e := range events {
		if top, _, sub := strings.Cut(e.Test, "/"); sub && (e.Action == "pass" || e.Action == "fail") {
			k := [2]string{e.pkg(), top}
			longestSub[k] = max(longestSub[k], e.Elapsed)
		}
	}
	for _, e := range events {
		if e.Action != "pass" && e.Action != "fail" && e.Action != "skip" {
			continue
		}
		r := result{Name: e.pkg(), Test: e.Test, Action: e.Action, Elapsed: e.Elapsed}
		switch {
		case e.Test == "" && e.Action != "skip": // "skip": no test files
			s.Packages = append(s.Packages, r)
		case e.Test != "" && !strings.Contains(e.Test, "/"):
			r.Elapsed = max(r.Elapsed, longestSub[[2]string{r.Name, r.Test}])
			s.Tests = append(s.Tests, r)
			s.Counts[e.Action]++
		}
	}
	slowestFirst := func(a, b result) int {
		return cmp.Or(cmp.Compare(b.Elapsed, a.Elapsed), cmp.Compare(a.Name, b.Name), cmp.Compare(a.Test, b.Test))
	}
	slices.SortFunc(s.Tests, slowestFirst)
	slices.SortFunc(s.Packages, slowestFirst)
	return s
}

func writeSummary(w io.Writer, s summary, top int) {
	module := modulePrefix()
	short := func(p string) string { return strings.TrimPrefix(p, module) }
	fmt.Fprintf(w, "\n==> the %d slowest tests (%d passed, %d failed, %d skipped)\n",
		min(top, len(s.Tests)), s.Counts["pass"], s.Counts["fail"], s.Counts["skip"])
	for _, r := range s.Tests[:min(top, len(s.Tests))] {
		fmt.Fprintf(w, "  %7.1fs  %-4s  %-28s %s\n", r.Elapsed, strings.ToUpper(r.Action), short(r.Name), r.Test)
	}
	fmt.Fprintf(w, "\n==> each package's wall time\n")
	for _, r := range s.Packages {
		fmt.Fprintf(w, "  %7.1fs  %-4s  %s\n", r.Elapsed, strings.ToUpper(r.Action), short(r.Name))
	}
}

// writeDurations keeps each package's wall time, passed or failed, for
// the next run to start the slowest first; reruns (labelled) are not
// scheduled with the others and are left out.
func writeDurations(name string, s summary) error {
	var b strings.Builder
	for _, r := range s.Packages {
		if !strings.HasSuffix(r.Name, ")") {
			fmt.Fprintf(&b, "%s %.1f\n", r.Name, r.Elapsed)
		}
	}
	return os.WriteFile(name, []byte(b.String()), 0o644)
}

// modulePrefix is "MODULE/" of the go.mod in the working folder, so the
// tables name packages as the repository's folders.
func modulePrefix() string {
	data, err := os.ReadFile("go.mod")
	if err != nil {
		return ""
	}
	for line := range strings.Lines(string(data)) {
		if m, ok := strings.CutPrefix(line, "module "); ok {
			return strings.TrimSpace(m) + "/"
		}
	}
	return ""
}
