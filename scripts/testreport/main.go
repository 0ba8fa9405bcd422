// Command testreport reads `go test -json` (or `go tool test2json` of a
// test binary) and prints what a contributor needs from a run of the
// whole suite.
//
//	go test -json ./... | testreport -save run.json [-label front=grpc]
//	testreport -summary [-top 15] run.json...
//
// As a filter it prints what plain `go test` prints (each package's
// ok/FAIL line, and the output of every test that failed, not of those
// that passed) and appends the events to the -save file. With -summary it
// reads saved runs and prints the slowest top-level tests and each
// package's wall time, pass or fail: the run's cost, named.
// It imports nothing of this module.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
)

func main() {
	save := flag.String("save", "", "append the events read to this file")
	label := flag.String("label", "", "a word added to each package's name in the saved events (e.g. a rerun's front)")
	summary := flag.Bool("summary", false, "print the slowest tests and the packages' wall times of the saved runs named as arguments")
	top := flag.Int("top", 15, "how many of the slowest tests -summary prints")
	durations := flag.String("durations", "", "with -summary, also write each package's wall time to this file, a line \"PACKAGE SECONDS\" (the next run starts the slowest first)")
	flag.Parse()
	if *summary {
		var events []event
		for _, name := range flag.Args() {
			got, err := readFile(name)
			if err != nil {
				fatal(err)
			}
			events = append(events, got...)
		}
		s := summarize(events)
		writeSummary(os.Stdout, s, *top)
		if *durations != "" {
			if err := writeDurations(*durations, s); err != nil {
				fatal(err)
			}
		}
		return
	}
	var out io.Writer = io.Discard
	if *save != "" {
		f, err := os.OpenFile(*save, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			fatal(err)
		}
		defer f.Close()
		out = f
	}
	if err := filter(os.Stdin, os.Stdout, out, *label); err != nil {
		fatal(err)
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "testreport:", err)
	os.Exit(1)
}

func readFile(name string) ([]event, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	events, err := parse(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", name, err)
	}
	return events, nil
}

// lines reads r a line at a time; a test's output line can be long.
func lines(r io.Reader) *bufio.Scanner {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	return sc
}

// parse reads saved events, one JSON object a line.
func parse(r io.Reader) ([]event, error) {
	var events []event
	sc := lines(r)
	for line := 1; sc.Scan(); line++ {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return nil, fmt.Errorf("line %d: %v", line, err)
		}
		events = append(events, e)
	}
	return events, sc.Err()
}
