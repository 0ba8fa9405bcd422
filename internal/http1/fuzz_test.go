package http1

import (
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// FuzzServe feeds raw bytes to a connection as a client would send them:
// whatever they are, the server answers or closes, and never panics or
// hangs.
func FuzzServe(f *testing.F) {
	for _, seed := range []string{
		"GET / HTTP/1.1\r\nHost: h\r\n\r\n",
		"POST /v2/process-instances HTTP/1.1\r\nHost: h\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
		"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\nabc",
		"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
		"\r\n\r\nGET /%zz HTTP/1.1\r\nHost: h\r\n\r\n",
	} {
		f.Add([]byte(seed))
	}
	s := &Server{Handler: http.HandlerFunc(echo), ReadHeaderTimeout: time.Second, IdleTimeout: time.Second}
	s.init()
	f.Fuzz(func(t *testing.T, in []byte) {
		client, server := net.Pipe()
		c := newConn(s, server)
		done := make(chan struct{})
		go func() {
			defer close(done)
			c.serve()
		}()
		go func() { _, _ = io.Copy(io.Discard, client) }()
		_ = client.SetWriteDeadline(time.Now().Add(time.Second))
		_, _ = client.Write(in)
		_ = client.Close()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("the connection did not end on %q", in)
		}
	})
}
