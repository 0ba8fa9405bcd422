package registry

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"strconv"
	"testing"

	"github.com/shardctl/shardctl/internal/registry/registryapi"
)

// A full fetch put together from per-app encodings is the document the
// whole-registry encoders write, gzipped as one stream of members, and
// an app that did not change keeps its encoding across versions.
func TestFullBodyFromApps(t *testing.T) {
	r, _ := newTestRegistry(t, Options{ReadStaleness: -1})
	check := func(step string) {
		t.Helper()
		s := r.current()
		for _, k := range []bodyKind{{}, {xml: true}, {gzip: true}, {xml: true, gzip: true}} {
			whole := &registryapi.Applications{VersionsDelta: strconv.FormatUint(s.version, 10), AppsHashcode: registryapi.Hashcode(s.instances), Applications: registryapi.Group(s.instances)}
			want := registryapi.EncodeAppsJSON(whole)
			if k.xml {
				want = registryapi.EncodeAppsXML(whole)
			}
			got := s.body(k)
			if k.gzip {
				zr, err := gzip.NewReader(bytes.NewReader(got))
				if err != nil {
					t.Fatalf("%s %+v: %v", step, k, err)
				}
				if got, err = io.ReadAll(zr); err != nil {
					t.Fatalf("%s %+v: %v", step, k, err)
				}
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s %+v:\n got %s\nwant %s", step, k, got, want)
			}
		}
	}
	check("empty")
	for i := range 3 {
		for _, app := range []string{"ORDERS", "BILLING", "A&B"} {
			if err := r.Register(app, testInstance(app, fmt.Sprintf("%s-%d", app, i), 5, 30)); err != nil {
				t.Fatal(err)
			}
		}
	}
	check("three apps")
	before := r.current().apps
	if err := r.Cancel("ORDERS", "ORDERS-1"); err != nil {
		t.Fatal(err)
	}
	check("one cancelled")
	after := r.current().apps
	for i, name := range []string{"A&B", "BILLING", "ORDERS"} {
		if after[i].app.Name != name {
			t.Fatalf("app %d is %s, want %s", i, after[i].app.Name, name)
		}
		if same := before[i] == after[i]; same != (name != "ORDERS") {
			t.Errorf("%s: encoding kept %v across a change of ORDERS", name, same)
		}
	}
	for _, id := range []string{"ORDERS-0", "ORDERS-2"} {
		if err := r.Cancel("ORDERS", id); err != nil {
			t.Fatal(err)
		}
	}
	check("an app gone")
}

// A big app is encoded in runs: after one change, the fetch is still the
// whole document (plain and gzipped), and every run but the one the
// change fell in is the run of the version before.
func TestBigAppEncodedInRuns(t *testing.T) {
	r, _ := newTestRegistry(t, Options{ReadStaleness: -1})
	for i := range 600 {
		if err := r.Register("BIG", testInstance("BIG", fmt.Sprintf("big-%03d", i), 5, 30)); err != nil {
			t.Fatal(err)
		}
	}
	fetch := func(step string) *snapshot {
		t.Helper()
		s := r.current()
		whole := &registryapi.Applications{VersionsDelta: strconv.FormatUint(s.version, 10), AppsHashcode: registryapi.Hashcode(s.instances), Applications: registryapi.Group(s.instances)}
		want := registryapi.EncodeAppsJSON(whole)
		if got := s.body(bodyKind{}); !bytes.Equal(got, want) {
			t.Fatalf("%s: plain fetch is not the whole document", step)
		}
		zr, err := gzip.NewReader(bytes.NewReader(s.body(bodyKind{gzip: true})))
		if err != nil {
			t.Fatal(err)
		}
		if got, err := io.ReadAll(zr); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s: gzipped fetch is not the whole document (%v)", step, err)
		}
		return s
	}
	before := fetch("600 instances")
	runs := before.apps[0].segs
	if n := len(runs); n < 600/segmentMax || n > 600/4 {
		t.Fatalf("600 instances in %d runs: want about %d", n, 600/segmentEvery)
	}
	for _, step := range []struct {
		name   string
		change func() error
	}{
		{"one cancelled", func() error { return r.Cancel("BIG", "big-300") }},
		{"one added", func() error { return r.Register("BIG", testInstance("BIG", "big-300a", 5, 30)) }},
		{"one changed", func() error { return r.SetMetadata("BIG", "big-100", map[string]string{"zone": "b"}) }},
	} {
		if err := step.change(); err != nil {
			t.Fatal(err)
		}
		after := fetch(step.name)
		kept := map[*segment]bool{}
		for _, sg := range after.apps[0].segs {
			kept[sg] = true
		}
		lost := 0
		for _, sg := range runs {
			if !kept[sg] {
				lost++
			}
		}
		// The run the change fell in, and a run split or merged by it.
		if lost == 0 || lost > 2 {
			t.Errorf("%s: %d of %d runs made again; want the one it fell in", step.name, lost, len(runs))
		}
		runs = after.apps[0].segs
	}
}
