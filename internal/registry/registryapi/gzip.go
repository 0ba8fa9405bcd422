package registryapi

import (
	"bytes"
	"compress/gzip"
	"sync"
)

// Gzip compresses b as one gzip member. Writers are reused: a new one
// allocates its compressor's tables (most of a small member's cost).
func Gzip(b []byte) []byte {
	var buf bytes.Buffer
	buf.Grow(len(b)/4 + 64)
	zw := gzipWriters.Get().(*gzip.Writer)
	zw.Reset(&buf)
	_, _ = zw.Write(b)
	_ = zw.Close()
	gzipWriters.Put(zw)
	return buf.Bytes()
}

var gzipWriters = sync.Pool{New: func() any {
	zw, _ := gzip.NewWriterLevel(nil, gzip.BestSpeed)
	return zw
}}
