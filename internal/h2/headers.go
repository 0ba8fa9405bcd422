package h2

import (
	"errors"
	"fmt"
	"strings"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// headerDecoder reads a HEADERS frame and its CONTINUATION frames into
// one header list, with the checks of x/net's MetaHeadersFrame (field
// names and values, pseudo-headers, the list's size), but with one
// decoder, one emit function and one list of fields for every block on
// the connection: the handler has the fields only during its call. The
// framer's own MetaHeadersFrame costs five allocations a block, a third
// of the proxy's on the job path.
type headerDecoder struct {
	dec    *hpack.Decoder
	fields []hpack.HeaderField
	max    uint32
	// of the block being read
	headersLeft, trailersLeft uint32
	sawRegular                bool
	invalid                   error
	truncated                 bool
}

// headerBlock is a decoded header block.
type headerBlock struct {
	streamID     uint32
	endStream    bool
	selfPriority bool // a priority that depends on its own stream
	fields       []hpack.HeaderField
	truncated    bool
}

func newHeaderDecoder(maxList uint32) *headerDecoder {
	d := &headerDecoder{max: maxList}
	d.dec = hpack.NewDecoder(4096, d.emit)
	d.dec.SetMaxStringLength(int(maxList))
	return d
}

func (d *headerDecoder) emit(hf hpack.HeaderField) {
	if !httpguts.ValidHeaderFieldValue(hf.Value) {
		// The value stays out of the error: it may be a secret.
		d.invalid = fmt.Errorf("invalid header field value for %q", hf.Name)
	}
	if strings.HasPrefix(hf.Name, ":") {
		if d.sawRegular {
			d.invalid = errors.New("pseudo header field after regular")
		}
	} else {
		d.sawRegular = true
		if !validWireName(hf.Name) {
			d.invalid = fmt.Errorf("invalid header field name %q", hf.Name)
		}
	}
	if d.invalid != nil {
		d.dec.SetEmitEnabled(false)
		return
	}
	left, size := &d.headersLeft, hf.Size()
	if hf.Name == "trailer" {
		// Each trailer it announces counts as a field of its own.
		n := uint32(strings.Count(hf.Value, ",") + 1)
		left, size = &d.trailersLeft, uint32(len(hf.Value))-n+1+n*hpack.HeaderField{}.Size()
	}
	if size > *left {
		d.dec.SetEmitEnabled(false)
		d.truncated = true
		d.headersLeft, d.trailersLeft = 0, 0
		return
	}
	*left -= size
	d.fields = append(d.fields, hf)
}

// validWireName: a token, in lower case (RFC 9113 section 8.2.1).
func validWireName(v string) bool {
	if v == "" {
		return false
	}
	for _, r := range v {
		if !httpguts.IsTokenRune(r) || 'A' <= r && r <= 'Z' {
			return false
		}
	}
	return true
}

// read decodes the block hf starts, reading its CONTINUATION frames
// from fr. Errors are an http2.ConnectionError (with detail), or a
// StreamError for a block that decoded but is malformed.
func (d *headerDecoder) read(fr *http2.Framer, hf *http2.HeadersFrame) (headerBlock, string, error) {
	b := headerBlock{streamID: hf.StreamID, endStream: hf.StreamEnded(),
		selfPriority: hf.HasPriority() && hf.Priority.StreamDep == hf.StreamID}
	d.fields = d.fields[:0]
	d.headersLeft, d.trailersLeft = d.max, d.max
	d.sawRegular, d.invalid, d.truncated = false, nil, false
	d.dec.SetEmitEnabled(true)
	frag, ended := hf.HeaderBlockFragment(), hf.HeadersEnded()
	for {
		// A sender far past the list's size, or still sending after a bad
		// field, is not decoded further.
		if int64(len(frag)) > 2*int64(d.headersLeft+d.trailersLeft) {
			return b, "header list too large", http2.ConnectionError(http2.ErrCodeProtocol)
		}
		if d.invalid != nil {
			return b, d.invalid.Error(), http2.ConnectionError(http2.ErrCodeProtocol)
		}
		if _, err := d.dec.Write(frag); err != nil {
			return b, err.Error(), http2.ConnectionError(http2.ErrCodeCompression)
		}
		if ended {
			break
		}
		f, err := fr.ReadFrame()
		if err != nil {
			return b, errDetail(fr, err), err
		}
		cf := f.(*http2.ContinuationFrame) // the framer lets nothing else come between
		frag, ended = cf.HeaderBlockFragment(), cf.HeadersEnded()
	}
	if err := d.dec.Close(); err != nil {
		return b, err.Error(), http2.ConnectionError(http2.ErrCodeCompression)
	}
	if d.invalid == nil {
		d.invalid = checkPseudos(d.fields)
	}
	if d.invalid != nil {
		return b, d.invalid.Error(), http2.StreamError{StreamID: b.streamID, Code: http2.ErrCodeProtocol, Cause: d.invalid}
	}
	b.fields, b.truncated = d.fields, d.truncated
	return b, "", nil
}

// checkPseudos: only the pseudo-headers of a request or of a response,
// not both, each once (they come first: emit saw to that).
func checkPseudos(fields []hpack.HeaderField) error {
	var request, response bool
	for i, f := range fields {
		if !strings.HasPrefix(f.Name, ":") {
			break
		}
		switch f.Name {
		case ":method", ":path", ":scheme", ":authority", ":protocol":
			request = true
		case ":status":
			response = true
		default:
			return fmt.Errorf("invalid pseudo-header %q", f.Name)
		}
		for _, g := range fields[:i] {
			if g.Name == f.Name {
				return fmt.Errorf("duplicate pseudo-header %q", f.Name)
			}
		}
	}
	if request && response {
		return errors.New("mix of request and response pseudo headers")
	}
	return nil
}
