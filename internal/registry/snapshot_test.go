package registry

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"strconv"
	"testing"
)

// A full fetch put together from per-app encodings is the document the
// whole-registry encoders write, gzipped as one stream of members, and
// an app that did not change keeps its encoding across versions.
func TestFullBodyFromApps(t *testing.T) {
	r, _ := newTestRegistry(t, Options{})
	check := func(step string) {
		t.Helper()
		s := r.current()
		for _, k := range []bodyKind{{}, {xml: true}, {gzip: true}, {xml: true, gzip: true}} {
			whole := &Applications{VersionsDelta: strconv.FormatUint(s.version, 10), AppsHashcode: hashcode(s.instances), Applications: group(s.instances)}
			want := encodeAppsJSON(whole)
			if k.xml {
				want = encodeAppsXML(whole)
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
