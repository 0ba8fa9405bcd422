package http1

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

// echo answers with what it read: method, path, the body, and a few
// headers, so a test sees the request the handler got.
func echo(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, "read body: "+err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	fmt.Fprintf(w, "%s %s host=%s len=%d ct=%s body=%s", r.Method, r.URL.RequestURI(), r.Host, r.ContentLength, r.Header.Get("Content-Type"), b)
}

func start(t *testing.T, s *Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	t.Cleanup(func() {
		_ = s.Close()
		if err := <-done; !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	})
	return ln.Addr().String()
}

func dialRaw(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	return c, bufio.NewReader(c)
}

func TestRequests(t *testing.T) {
	addr := start(t, &Server{Handler: http.HandlerFunc(echo)})
	for _, tc := range []struct {
		name, send string
		status     int
		body       string // a part of it
		closes     bool
	}{
		{name: "content-length", send: "POST /v2/x?a=1 HTTP/1.1\r\nHost: h\r\nContent-Type: application/json\r\nContent-Length: 7\r\n\r\n{\"a\":1}",
			status: 200, body: "POST /v2/x?a=1 host=h len=7 ct=application/json body={\"a\":1}"},
		{name: "lower-case headers", send: "POST / HTTP/1.1\r\nhost: h\r\ncontent-type: text/x\r\ncontent-length: 2\r\n\r\nhi",
			status: 200, body: "ct=text/x body=hi"},
		{name: "chunked", send: "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\nTrailer: x\r\n\r\n",
			status: 200, body: "len=-1 ct= body=abcde"},
		{name: "no body", send: "GET /v2/topology HTTP/1.1\r\nHost: h\r\n\r\n", status: 200, body: "GET /v2/topology host=h len=0"},
		{name: "empty lines first", send: "\r\n\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n", status: 200, body: "GET /"},
		{name: "HTTP/1.0 closes", send: "GET / HTTP/1.0\r\n\r\n", status: 200, body: "GET /", closes: true},
		{name: "Connection: close", send: "GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n", status: 200, closes: true},
		{name: "no Host", send: "GET / HTTP/1.1\r\n\r\n", status: 400, closes: true},
		{name: "two Hosts", send: "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", status: 400, closes: true},
		{name: "HTTP/2 preface", send: "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", status: 505, closes: true},
		{name: "garbage", send: "hello\r\n\r\n", status: 400, closes: true},
		{name: "bad header", send: "GET / HTTP/1.1\r\nHost: h\r\nno colon\r\n\r\n", status: 400, closes: true},
		{name: "folded header", send: "GET / HTTP/1.1\r\nHost: h\r\nX: a\r\n b\r\n\r\n", status: 400, closes: true},
		{name: "smuggling", send: "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", status: 400, closes: true},
		{name: "two lengths", send: "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd", status: 400, closes: true},
		{name: "negative length", send: "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: -1\r\n\r\n", status: 400, closes: true},
		{name: "gzip encoding", send: "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip\r\n\r\n", status: 501, closes: true},
		{name: "bad chunk", send: "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", status: 400, body: "read body", closes: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, br := dialRaw(t, addr)
			if _, err := io.WriteString(c, tc.send); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.status || !strings.Contains(string(b), tc.body) {
				t.Errorf("%d %q, want %d with %q", resp.StatusCode, b, tc.status, tc.body)
			}
			if resp.Header.Get("Date") == "" {
				t.Errorf("no Date header: %v", resp.Header)
			}
			// A connection kept open answers a second request.
			_, _ = io.WriteString(c, "GET /again HTTP/1.1\r\nHost: h\r\n\r\n")
			resp2, err := http.ReadResponse(br, nil)
			if tc.closes != (err != nil) {
				t.Errorf("second request: %v (closes: %v)", err, tc.closes)
			}
			if err == nil {
				_ = resp2.Body.Close()
			}
		})
	}
}

// TestPipelined: requests sent together are answered in order.
func TestPipelined(t *testing.T) {
	addr := start(t, &Server{Handler: http.HandlerFunc(echo)})
	c, br := dialRaw(t, addr)
	var all strings.Builder
	for i := range 20 {
		fmt.Fprintf(&all, "POST /%d HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\n\r\n%d", i, i%10)
	}
	if _, err := io.WriteString(c, all.String()); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		if want := fmt.Sprintf("POST /%d host=h len=1 ct= body=%d", i, i%10); string(b) != want {
			t.Errorf("answer %d: %q, want %q", i, b, want)
		}
	}
}

// TestWithNetHTTPClient: Go's own client, keep-alive, a body it streams
// in chunks, Expect: 100-continue, and a HEAD.
func TestWithNetHTTPClient(t *testing.T) {
	addr := start(t, &Server{Handler: http.HandlerFunc(echo)})
	tr := &http.Transport{ExpectContinueTimeout: 5 * time.Second}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	for i := range 3 {
		pr, pw := io.Pipe()
		go func() {
			_, _ = io.WriteString(pw, "streamed")
			_ = pw.Close()
		}()
		req, _ := http.NewRequest("PUT", "http://"+addr+"/s", pr)
		req.Header.Set("Expect", "100-continue")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if want := "PUT /s host=" + addr + " len=-1 ct= body=streamed"; string(b) != want {
			t.Errorf("round %d: %q, want %q", i, b, want)
		}
	}
	resp, err := c.Head("http://" + addr + "/h")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != 200 || resp.ContentLength <= 0 {
		t.Errorf("HEAD: %d, length %d", resp.StatusCode, resp.ContentLength)
	}
}

func TestHeadTooLarge(t *testing.T) {
	addr := start(t, &Server{Handler: http.HandlerFunc(echo), MaxHeaderBytes: 1024})
	c, br := dialRaw(t, addr)
	_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: h\r\nX-Big: "+strings.Repeat("x", 2000)+"\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("status %d, want 431", resp.StatusCode)
	}
}

// TestSlowHead: a client that starts a request and stalls is answered
// 408 and cut off after ReadHeaderTimeout; an idle one after IdleTimeout.
func TestSlowHead(t *testing.T) {
	addr := start(t, &Server{Handler: http.HandlerFunc(echo), ReadHeaderTimeout: 100 * time.Millisecond, IdleTimeout: 200 * time.Millisecond})
	c, br := dialRaw(t, addr)
	_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHo")
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusRequestTimeout {
		t.Fatalf("stalled head: %v %v", resp, err)
	}
	idle, br2 := dialRaw(t, addr)
	if _, err := br2.ReadByte(); !errors.Is(err, io.EOF) {
		t.Errorf("idle connection: %v, want it closed", err)
	}
	_ = idle
}

// TestHeadersOfOneRequestEach: a connection's requests reuse one header
// map and its strings; each handler sees its own request's headers, no
// more, no fewer.
func TestHeadersOfOneRequestEach(t *testing.T) {
	addr := start(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var names []string
		for k, v := range r.Header {
			names = append(names, k+"="+strings.Join(v, ","))
		}
		slices.Sort(names)
		fmt.Fprint(w, strings.Join(names, " "))
	})})
	c, br := dialRaw(t, addr)
	for _, tc := range []struct{ head, want string }{
		{"Host: h\r\nX-A: 1\r\nAccept: a\r\n", "Accept=a Host=h X-A=1"},
		{"Host: h\r\nAccept: b\r\n", "Accept=b Host=h"},
		{"Host: h\r\nAccept: b\r\nAccept: c\r\n", "Accept=b,c Host=h"},
		{"Host: h\r\nAccept: c\r\nAccept: b\r\nX-A: 1\r\n", "Accept=c,b Host=h X-A=1"},
		{"Host: h2\r\n", "Host=h2"},
	} {
		_, _ = io.WriteString(c, "GET / HTTP/1.1\r\n"+tc.head+"\r\n")
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		if string(b) != tc.want {
			t.Errorf("after %q: handler saw %q, want %q", tc.head, b, tc.want)
		}
	}
}

// TestSlowBody: a body that stalls fails the handler's read after
// ReadHeaderTimeout, though its head came whole and the connection's
// idle timeout is far longer.
func TestSlowBody(t *testing.T) {
	addr := start(t, &Server{Handler: http.HandlerFunc(echo), ReadHeaderTimeout: 100 * time.Millisecond, IdleTimeout: time.Minute})
	c, br := dialRaw(t, addr)
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	_, _ = io.WriteString(c, "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n\r\nabc")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("stalled body: no answer within 5 s: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "timeout") {
		t.Fatalf("stalled body: %d %q, want the handler's 400 for a read that timed out", resp.StatusCode, b)
	}
}

// TestClientGone: a handler still running when its client leaves sees
// its context end, and ClientGone says so at once.
func TestClientGone(t *testing.T) {
	ended := make(chan error, 1)
	gone := make(chan bool, 1)
	addr := start(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
			gone <- w.(interface{ ClientGone() bool }).ClientGone()
			ended <- r.Context().Err()
		case <-time.After(10 * time.Second):
			ended <- errors.New("the context did not end")
		}
	})})
	c, _ := dialRaw(t, addr)
	_, _ = io.WriteString(c, "GET /long HTTP/1.1\r\nHost: h\r\n\r\n")
	time.Sleep(2 * watchAfter)
	_ = c.Close()
	if err := <-ended; !errors.Is(err, context.Canceled) {
		t.Errorf("handler's context: %v", err)
	}
	if !<-gone {
		t.Error("ClientGone: false after the client left")
	}
}

// TestShutdown waits for a request in flight, closes idle connections,
// and refuses new ones.
func TestShutdown(t *testing.T) {
	release := make(chan struct{})
	s := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			<-release
		}
		_, _ = io.WriteString(w, "done")
	})}
	addr := start(t, s)
	idle, ibr := dialRaw(t, addr)
	_, _ = io.WriteString(idle, "GET / HTTP/1.1\r\nHost: h\r\n\r\n")
	if resp, err := http.ReadResponse(ibr, nil); err != nil {
		t.Fatal(err)
	} else {
		_, _ = io.ReadAll(resp.Body)
	}
	busy, bbr := dialRaw(t, addr)
	_, _ = io.WriteString(busy, "GET /slow HTTP/1.1\r\nHost: h\r\n\r\n")
	time.Sleep(50 * time.Millisecond)
	stopped := make(chan error, 1)
	go func() { stopped <- s.Shutdown(context.Background()) }()
	if _, err := ibr.ReadByte(); !errors.Is(err, io.EOF) {
		t.Errorf("idle connection during shutdown: %v, want it closed", err)
	}
	select {
	case err := <-stopped:
		t.Fatalf("Shutdown returned (%v) with a request in flight", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	resp, err := http.ReadResponse(bbr, nil)
	if err != nil || !resp.Close {
		t.Fatalf("the request in flight: %v %v, want its answer with Connection: close", resp, err)
	}
	if err := <-stopped; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if c, err := net.Dial("tcp", addr); err == nil {
		_ = c.Close()
		t.Error("a new connection was accepted after Shutdown")
	}
}

func TestPanicIs500(t *testing.T) {
	addr := start(t, &Server{Handler: http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("boom") })})
	c, br := dialRaw(t, addr)
	_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: h\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 500 {
		t.Errorf("%v %v, want 500", resp, err)
	}
}

// TestWatchedRequestsAnswer: requests long enough to be watched for the
// client leaving, many at once, all get their answer and their
// connection back (a watcher that outlived its request once held its
// connection forever).
func TestWatchedRequestsAnswer(t *testing.T) {
	addr := start(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(watchAfter + time.Duration(len(r.URL.Path))*100*time.Microsecond)
		_, _ = io.WriteString(w, "ok")
	})})
	tr := &http.Transport{MaxConnsPerHost: 16}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 20 * time.Second}
	errs := make(chan error, 160)
	for g := range 16 {
		go func() {
			for i := range 10 {
				resp, err := c.Get(fmt.Sprintf("http://%s/%s", addr, strings.Repeat("x", (g+i)%7)))
				if err == nil {
					_, err = io.ReadAll(resp.Body)
					_ = resp.Body.Close()
				}
				errs <- err
			}
		}()
	}
	for range 160 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// A request sent while the one before it is being handled (after the
// server read it, before its answer) is answered too, and so is a
// client's end sent then: the answer goes out inside the next read,
// which must not wait for what is already there.
func TestRequestDuringTheAnswer(t *testing.T) {
	for _, then := range []string{"a second request", "the client's end"} {
		t.Run(then, func(t *testing.T) {
			sent := make(chan struct{})
			addr := start(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/first" {
					<-sent
				}
				_, _ = io.WriteString(w, r.URL.Path)
			})})
			c, br := dialRaw(t, addr)
			_, _ = io.WriteString(c, "GET /first HTTP/1.1\r\nHost: h\r\n\r\n")
			time.Sleep(20 * time.Millisecond) // read by the server
			if then == "a second request" {
				_, _ = io.WriteString(c, "GET /second HTTP/1.1\r\nHost: h\r\n\r\n")
			} else {
				_ = c.(*net.TCPConn).CloseWrite()
			}
			time.Sleep(20 * time.Millisecond) // in the server's socket
			close(sent)
			want := []string{"/first", "/second"}
			if then != "a second request" {
				want = want[:1]
			}
			for _, path := range want {
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatalf("the answer to %s: %v", path, err)
				}
				b, _ := io.ReadAll(resp.Body)
				if string(b) != path {
					t.Fatalf("answer %q, want %q", b, path)
				}
			}
			if then != "a second request" {
				if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
					t.Errorf("after the client's end: %v, want the connection closed", err)
				}
			}
		})
	}
}
