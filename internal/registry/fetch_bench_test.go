package registry

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/shardctl/shardctl/internal/registry/httpfront"
	"github.com/shardctl/shardctl/internal/registry/registryapi"
)

// BenchmarkFullFetch600 is a full fetch of 600 instances over HTTP on
// loopback, the size at which Eureka's took ~300 ms (120 ms gzipped) in a
// published measurement: served from the snapshot, and right after a
// change (the snapshot is encoded again by that read).
func BenchmarkFullFetch600(b *testing.B) {
	s, base := startServer(b, Config{})
	r := s.Registry()
	for i := range 600 {
		in := testInstance(fmt.Sprintf("APP-%d", i%20), fmt.Sprintf("i-%d", i), 30, 90)
		in.VIPAddress = "vip"
		in.Metadata = map[string]string{"zone": "a", "build": "b-42", "owner": "team-x"}
		if err := r.Register(in.App, in); err != nil {
			b.Fatal(err)
		}
	}
	client := &http.Client{Transport: &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 4}}
	fetch := func(b *testing.B, accept string, gz bool) int {
		req, _ := http.NewRequest("GET", base+"/eureka/apps", nil)
		req.Header.Set("Accept", accept)
		if gz {
			req.Header.Set("Accept-Encoding", "gzip")
		}
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("status %d", resp.StatusCode)
		}
		return int(n)
	}
	for _, tc := range []struct {
		name, accept string
		gz, change   bool
	}{
		{"json", "application/json", false, false},
		{"json-gzip", "application/json", true, false},
		{"xml", "application/xml", false, false},
		{"json-after-change", "application/json", false, true},
		{"json-gzip-after-change", "application/json", true, true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			size := 0
			i := 0
			for b.Loop() {
				if tc.change {
					b.StopTimer()
					in := testInstance("APP-0", "i-0", 30, 90)
					in.Metadata = map[string]string{"n": fmt.Sprint(i)}
					i++
					if err := r.Register("APP-0", in); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
				}
				size = fetch(b, tc.accept, tc.gz)
			}
			b.ReportMetric(float64(size)/1024, "KiB/fetch")
		})
	}
}

// BenchmarkRegisterHandler is one Eureka registration through the HTTP
// handler, without the network: the registry's own cost per register.
func BenchmarkRegisterHandler(b *testing.B) {
	r, _ := newTestRegistry(b, Options{})
	h := httpfront.Handler(r, httpfront.Options{})
	body := string(registryapi.EncodeInstanceJSON(testInstance("ORDERS", "x", 30, 90)))
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		req := httptest.NewRequest(http.MethodPost, "/eureka/apps/ORDERS", strings.NewReader(strings.Replace(body, `"x"`, fmt.Sprintf(`"i-%d"`, i), 1)))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusNoContent {
			b.Fatalf("%d %s", rec.Code, rec.Body)
		}
	}
}
