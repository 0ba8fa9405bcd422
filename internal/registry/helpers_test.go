package registry

import (
	"context"
	"fmt"
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
	code, b, err := send(testClient, method, url, header, body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	return code, b
}

// send is do that reports a request that got no answer rather than
// failing the test: the replica may be dead.
func send(c *http.Client, method, url string, header http.Header, body string) (int, string, error) {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, "", fmt.Errorf("read: %w", err)
	}
	return resp.StatusCode, string(b), nil
}
