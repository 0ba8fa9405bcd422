package logs

import (
	"bytes"
	"io"
	"sync"
)

// Held is a writer that keeps what is written to it until Open, then
// writes that and passes every later write straight through. A serve
// command logs through one, so that the lines a runtime logs while it
// starts (a shard added, a replica waiting for etcd) come after the
// "listening on HOST:PORT" line that scripts and tests wait for first.
type Held struct {
	mu   sync.Mutex
	w    io.Writer
	buf  bytes.Buffer
	open bool
}

// Hold is a Held writer in front of w, closed until Open.
func Hold(w io.Writer) *Held { return &Held{w: w} }

func (h *Held) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.open {
		return h.w.Write(p)
	}
	return h.buf.Write(p)
}

// Open writes what was kept and lets later writes through; safe twice.
func (h *Held) Open() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.open {
		return nil
	}
	h.open = true
	_, err := h.buf.WriteTo(h.w)
	h.buf = bytes.Buffer{}
	return err
}
