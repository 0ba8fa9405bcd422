package grpcwire

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// ParseTimeout reads a grpc-timeout value: at most 8 digits and a unit.
func ParseTimeout(v string) (time.Duration, error) {
	if len(v) < 2 || len(v) > 9 {
		return 0, fmt.Errorf("grpc-timeout %q", v)
	}
	n, err := strconv.ParseInt(v[:len(v)-1], 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("grpc-timeout %q", v)
	}
	unit, ok := timeoutUnit(v[len(v)-1])
	if !ok {
		return 0, fmt.Errorf("grpc-timeout %q: unknown unit", v)
	}
	if n > math.MaxInt64/int64(unit) {
		// As grpc-go reads it: a deadline past what a Duration holds is
		// no deadline to speak of, not an overflow into the past.
		return math.MaxInt64, nil
	}
	return time.Duration(n) * unit, nil
}

// timeoutUnits are grpc-timeout's units, smallest first; reading and
// writing a value both go through them (a fixed array, not a literal
// built per call).
var timeoutUnits = [...]struct {
	d time.Duration
	c byte
}{{time.Nanosecond, 'n'}, {time.Microsecond, 'u'}, {time.Millisecond, 'm'}, {time.Second, 'S'}, {time.Minute, 'M'}, {time.Hour, 'H'}}

func timeoutUnit(c byte) (time.Duration, bool) {
	for _, u := range timeoutUnits {
		if u.c == c {
			return u.d, true
		}
	}
	return 0, false
}

// FormatTimeout writes d as a grpc-timeout value (rounded up, so a call
// never gets less time than it had).
func FormatTimeout(d time.Duration) string {
	if d <= 0 {
		return "1n"
	}
	for _, u := range timeoutUnits {
		n := (d + u.d - 1) / u.d
		if n < 1e8 {
			return strconv.FormatInt(int64(n), 10) + string(u.c)
		}
	}
	return "99999999H"
}

// grpc-message is percent-encoded: bytes outside printable ASCII and
// '%' itself (gRPC's HTTP/2 protocol).
func EncodeMessage(msg string) string {
	var b strings.Builder
	for i := 0; i < len(msg); i++ {
		c := msg[i]
		if c >= ' ' && c <= '~' && c != '%' {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}

func DecodeMessage(msg string) string {
	if !strings.Contains(msg, "%") {
		return msg
	}
	var b strings.Builder
	for i := 0; i < len(msg); i++ {
		if msg[i] == '%' && i+2 < len(msg) {
			if v, err := strconv.ParseUint(msg[i+1:i+3], 16, 8); err == nil {
				b.WriteByte(byte(v))
				i += 2
				continue
			}
		}
		b.WriteByte(msg[i])
	}
	return b.String()
}

// Status is the status a response head or its trailers carry; for
// one without grpc-status, what the HTTP status means to gRPC clients.
func Status(fields []hpack.HeaderField, httpStatus string) *status.Status {
	code, msg, haveCode := codes.Unknown, "", false
	var details string
	for _, f := range fields {
		switch f.Name {
		case "grpc-status":
			if n, err := strconv.Atoi(f.Value); err == nil {
				code, haveCode = codes.Code(n), true
			}
		case "grpc-message":
			msg = DecodeMessage(f.Value)
		case "grpc-status-details-bin":
			details = f.Value
		}
	}
	if !haveCode {
		return status.New(httpStatusCode(httpStatus), "the shard answered HTTP status "+httpStatus+" without a gRPC status")
	}
	if code == codes.OK && msg == "" && details == "" {
		return statusOK
	}
	if details != "" {
		var sp rpcstatus.Status
		if b, err := decodeBinHeader(details); err == nil && proto.Unmarshal(b, &sp) == nil && sp.GetCode() == int32(code) {
			return status.FromProto(&sp)
		}
	}
	return status.New(code, msg)
}

func decodeBinHeader(v string) ([]byte, error) {
	if len(v)%4 == 0 {
		return base64.StdEncoding.DecodeString(v)
	}
	return base64.RawStdEncoding.DecodeString(v)
}

// WholeMessage reports the length of the length-prefixed message at the
// front of b, prefix included, if all of it is there.
func WholeMessage(b []byte) (int, bool) {
	if len(b) < 5 {
		return 0, false
	}
	n := 5 + int(binary.BigEndian.Uint32(b[1:5]))
	return n, len(b) >= n
}

// StatusFields are trailers with a call's status, after head (the
// response head of a trailers-only answer, or none).
func StatusFields(head []hpack.HeaderField, st *status.Status) []hpack.HeaderField {
	fields := make([]hpack.HeaderField, 0, len(head)+3)
	fields = append(fields, head...)
	fields = append(fields, hpack.HeaderField{Name: "grpc-status", Value: strconv.Itoa(int(st.Code()))})
	if m := st.Message(); m != "" {
		fields = append(fields, hpack.HeaderField{Name: "grpc-message", Value: EncodeMessage(m)})
	}
	if p := st.Proto(); len(p.GetDetails()) > 0 {
		if b, err := proto.Marshal(p); err == nil {
			fields = append(fields, hpack.HeaderField{Name: "grpc-status-details-bin", Value: base64.RawStdEncoding.EncodeToString(b)})
		}
	}
	return fields
}

// MaxRecvMsgSize is the largest request message the proxy takes, on
// either front.
const MaxRecvMsgSize = 32 << 20

// statusOK is every plain OK's: a Status is never changed once made.
var statusOK = status.New(codes.OK, "")

// httpStatusCode maps an HTTP status without a gRPC status, as gRPC
// clients do.
func httpStatusCode(st string) codes.Code {
	switch st {
	case "400":
		return codes.Internal
	case "401":
		return codes.Unauthenticated
	case "403":
		return codes.PermissionDenied
	case "404":
		return codes.Unimplemented
	case "429", "502", "503", "504":
		return codes.Unavailable
	}
	return codes.Unknown
}

// MaxRespMsgSize is the largest response the frame front buffers from a
// shard to rewrite its keys.
const MaxRespMsgSize = 64 << 20

// OneMessage is the one uncompressed message a unary request carries.
func OneMessage(req []byte) ([]byte, error) {
	if len(req) < 5 {
		return nil, status.Error(codes.Internal, "grpc: the request ended before its one message")
	}
	if req[0] != 0 {
		return nil, status.Error(codes.Internal, "grpc: compressed flag set with identity or empty encoding")
	}
	if n := binary.BigEndian.Uint32(req[1:5]); int64(n) != int64(len(req)-5) {
		return nil, status.Errorf(codes.Internal, "grpc: a unary request carries one message of %d bytes, got %d bytes", n, len(req)-5)
	}
	return req[5:], nil
}

// framed prefixes a message for the wire, in a buffer the caller may
// append the message to.
func Framed(n int) []byte { return make([]byte, 5, 5+n+16) }

func SetPrefix(b []byte) []byte {
	b[0] = 0
	binary.BigEndian.PutUint32(b[1:5], uint32(len(b)-5))
	return b
}

// ResetCode is what a stream reset means to a gRPC client, as grpc-go
// maps it: a CANCEL once the call's deadline (zero: none) has passed is
// the peer giving up at that deadline.
func ResetCode(code http2.ErrCode, deadline time.Time) codes.Code {
	switch code {
	case http2.ErrCodeRefusedStream:
		return codes.Unavailable
	case http2.ErrCodeCancel:
		if !deadline.IsZero() && !deadline.After(time.Now()) {
			return codes.DeadlineExceeded
		}
		return codes.Canceled
	case http2.ErrCodeEnhanceYourCalm:
		return codes.ResourceExhausted
	case http2.ErrCodeInadequateSecurity:
		return codes.PermissionDenied
	}
	return codes.Internal
}

// ReservedHeader: the transport's own headers, which grpc-go keeps out
// of a call's metadata.
func ReservedHeader(name string) bool {
	switch name {
	case "content-type", "user-agent", "grpc-message-type", "grpc-encoding", "grpc-message", "grpc-status",
		"grpc-timeout", "grpc-status-details-bin", "te":
		return true
	}
	return false
}

func MarshalFramed(m any) ([]byte, error) {
	msg := m.(proto.Message)
	b, err := proto.MarshalOptions{}.MarshalAppend(Framed(proto.Size(msg)), msg)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "grpc: error while marshaling: %v", err)
	}
	return SetPrefix(b), nil
}
