package h2

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2/hpack"

	"github.com/shardctl/shardctl/internal/budget"
)

// answerer answers every request as soon as its head ends it.
type answerer struct{}

func (answerer) Headers(s *Stream, _ []hpack.HeaderField, end, _ bool) {
	if end {
		_ = s.Respond([]hpack.HeaderField{{Name: ":status", Value: "200"}}, []byte("ok"), []hpack.HeaderField{{Name: "grpc-status", Value: "0"}})
	}
}
func (answerer) Data(*Stream, []byte, bool) {}
func (answerer) Closed(*Stream, error)      {}

// answered closes a request's channel (its stream's Value) when the
// answer has ended, or the stream closed without one.
type answered struct{}

func (answered) Headers(s *Stream, _ []hpack.HeaderField, end, _ bool) {
	if end {
		close(s.Value.(chan struct{}))
	}
}
func (answered) Data(s *Stream, _ []byte, end bool) {
	if end {
		close(s.Value.(chan struct{}))
	}
}
func (answered) Closed(s *Stream, _ error) { close(s.Value.(chan struct{})) }

// Requests that many goroutines make at once with RequestShared all go
// out: one goroutine yields and flushes for those that queued while it
// yielded, and none of their frames waits for a later request to carry
// it (each goroutine here waits for its answer before its next request,
// so a frame left behind would be an answer that never comes).
func TestSharedRequestsAllGoOut(t *testing.T) {
	client, _ := pair(t, Config{}, Config{}, answered{}, answerer{})
	const goroutines, each = 16, 50
	errs := make(chan error, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				done := make(chan struct{})
				if _, err := client.RequestShared(request, nil, done, false); err != nil {
					errs <- err
					return
				}
				select {
				case <-done:
				case <-time.After(budget.Of(10 * time.Second)):
					errs <- fmt.Errorf("goroutine %d, request %d: no answer (its frames never went out)", g, i)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
