package registry

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/budget"
)

// startServer runs a registry on a free 127.0.0.1 port for one test.
func startServer(t testing.TB, cfg Config) (*Server, string) {
	t.Helper()
	cfg.Listen = "127.0.0.1:0"
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = s.Close(budget.Context(t, 5*time.Second))
	})
	return s, "http://" + s.Addr().String()
}

var testClient = &http.Client{Timeout: budget.Of(10 * time.Second)}

// do sends one request and returns the status code and body.
func do(t testing.TB, method, url string, header http.Header, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := testClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read: %v", method, url, err)
	}
	return resp.StatusCode, string(b)
}
