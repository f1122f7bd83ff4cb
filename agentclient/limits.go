package agentclient

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
)

// Every byte that comes from Letta is bounded in memory. The limits are
// Config fields; a server that passes one ends the call with a
// *ProtocolError, which Classify calls Permanent.
const (
	// DefaultMaxEventBytes bounds one SSE event: its data lines joined.
	DefaultMaxEventBytes = 16 << 20
	// DefaultMaxResponseBytes bounds the body of one non-streaming answer
	// (a run, a page of messages).
	DefaultMaxResponseBytes = 8 << 20
	// DefaultMaxTranscriptBytes bounds the text one turn accumulates in its
	// StreamState: reasoning, tool calls and returns, the answer.
	DefaultMaxTranscriptBytes = 8 << 20
)

// Limits are the byte bounds a client applies (see Config).
type Limits struct {
	Line, Event, Response, Transcript int
}

// Limits returns the client's byte bounds, defaults filled in.
func (c *Client) Limits() Limits {
	return Limits{Line: c.cfg.MaxLineBytes, Event: c.cfg.MaxEventBytes,
		Response: c.cfg.MaxResponseBytes, Transcript: c.cfg.MaxTranscriptBytes}
}

func (cfg *Config) limitDefaults() {
	if cfg.MaxEventBytes <= 0 {
		cfg.MaxEventBytes = DefaultMaxEventBytes
	}
	if cfg.MaxLineBytes <= 0 {
		cfg.MaxLineBytes = min(DefaultMaxLineBytes, cfg.MaxEventBytes)
	}
	if cfg.MaxResponseBytes <= 0 {
		cfg.MaxResponseBytes = DefaultMaxResponseBytes
	}
	if cfg.MaxTranscriptBytes <= 0 {
		cfg.MaxTranscriptBytes = DefaultMaxTranscriptBytes
	}
}

// Sentinels a *ProtocolError wraps (errors.Is works on the ProtocolError).
var (
	// ErrEventTooLong: an SSE event's data passed MaxEventBytes.
	ErrEventTooLong = errors.New("SSE event too long")
	// ErrResponseTooLarge: a JSON answer's body passed MaxResponseBytes.
	ErrResponseTooLarge = errors.New("response body too large")
	// ErrTranscriptTooLarge: a turn's transcript passed MaxTranscriptBytes.
	ErrTranscriptTooLarge = errors.New("turn transcript too large")
	// ErrNotEventStream: a stream request was answered with a body that is
	// not text/event-stream (an HTML error page, a JSON document).
	ErrNotEventStream = errors.New("response is not an event stream")
	// ErrContentEncoding: a stream was sent with a content coding (gzip)
	// although the request asked for none (Accept-Encoding: identity).
	ErrContentEncoding = errors.New("event stream sent with a content coding")
)

// ProtocolError: the server broke the protocol or passed one of the
// client's byte limits (an SSE line or event too long, a body that is not
// an event stream, a response body or a turn's transcript too large).
// Sending or reading again cannot help: Classify says Permanent, and a
// continuation ends the turn with it rather than look for the message or
// send it again.
type ProtocolError struct {
	// Op names the call ("send message", "get run", …); Method and Path
	// the request (no host, no query).
	Op, Method, Path string
	// Err is the violation: ErrLineTooLong, ErrEventTooLong,
	// ErrResponseTooLarge, ErrTranscriptTooLarge or ErrNotEventStream.
	Err error
	// Limit is the byte limit passed, with the Config field that sets it
	// (LimitName); 0 for a violation that is not about size.
	Limit     int
	LimitName string
	// Detail says more (the Content-Type received).
	Detail string
}

func (e *ProtocolError) Error() string {
	var b strings.Builder
	b.WriteString("letta: ")
	if e.Op != "" {
		b.WriteString(e.Op)
		b.WriteString(": ")
	}
	if e.Path != "" {
		fmt.Fprintf(&b, "%s %s: ", e.Method, e.Path)
	}
	b.WriteString("protocol violation: ")
	b.WriteString(strings.TrimPrefix(e.Err.Error(), "agentclient: "))
	if e.Limit > 0 {
		fmt.Fprintf(&b, " (limit %d bytes, %s)", e.Limit, e.LimitName)
	}
	if e.Detail != "" {
		b.WriteString(": ")
		b.WriteString(e.Detail)
	}
	return b.String()
}

// Unwrap returns the violation's sentinel.
func (e *ProtocolError) Unwrap() error { return e.Err }

// IsProtocolError reports whether err is (or wraps) a *ProtocolError.
func IsProtocolError(err error) bool {
	var pe *ProtocolError
	return errors.As(err, &pe)
}

// overLimit is the error of a passed limit, before the stream names the
// request (protocolError fills that in).
func overLimit(err error, limit int, name string) *ProtocolError {
	return &ProtocolError{Err: err, Limit: limit, LimitName: name}
}

// protocolError names the request in a violation found while reading it.
func (c *Client) protocolError(op, method, path string, err error) *ProtocolError {
	var pe *ProtocolError
	if errors.As(err, &pe) {
		cp := *pe
		pe = &cp
	} else {
		pe = &ProtocolError{Err: err}
	}
	pe.Op, pe.Method, pe.Path = op, method, path
	return pe
}

// checkEventStream refuses a 2xx stream response whose Content-Type says it
// is something else. An absent type, and text/plain (what net/http sniffs
// for a handler that set none), are read as a stream.
func checkEventStream(resp *http.Response) error {
	if ce := resp.Header.Get("Content-Encoding"); ce != "" && !strings.EqualFold(ce, "identity") {
		if len(ce) > 100 {
			ce = ce[:100]
		}
		return fmt.Errorf("%w (Content-Encoding %q)", ErrContentEncoding, ce)
	}
	ct := resp.Header.Get("Content-Type")
	if ct == "" {
		return nil
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err == nil && (mt == "text/event-stream" || mt == "text/plain") {
		return nil
	}
	if len(ct) > 100 {
		ct = ct[:100]
	}
	return fmt.Errorf("%w (Content-Type %q)", ErrNotEventStream, ct)
}

// appendBounded appends src to dst growing dst's capacity to at most limit
// (the caller checked that len(dst)+len(src) <= limit), so a bounded buffer
// never holds more than its limit.
func appendBounded(dst, src []byte, limit int) []byte {
	need := len(dst) + len(src)
	if need <= cap(dst) {
		return append(dst, src...)
	}
	nc := min(max(2*cap(dst), need, 512), max(limit, need))
	n := make([]byte, len(dst), nc)
	copy(n, dst)
	return append(n, src...)
}

// limitedBody reads at most n bytes of a response body; reading more sets
// over and fails.
type limitedBody struct {
	r    io.Reader
	n    int
	over bool
}

func (l *limitedBody) Read(p []byte) (int, error) {
	if l.n <= 0 {
		// One byte more tells a body of exactly n bytes from a longer one.
		var one [1]byte
		k, err := l.r.Read(one[:])
		if k > 0 {
			l.over = true
			return 0, ErrResponseTooLarge
		}
		return 0, err
	}
	if len(p) > l.n {
		p = p[:l.n]
	}
	k, err := l.r.Read(p)
	l.n -= k
	return k, err
}

// noRedirects returns the client to use for hc (nil: a new one with
// NewTransport): a shallow copy that never follows a redirect, so that the
// API key is never sent to another origin (net/http keeps Authorization on
// a redirect to another port or scheme of the same host). The 3xx answer
// becomes an *Error naming the target, as it does for streams.
func noRedirects(hc *http.Client) *http.Client {
	var c http.Client
	if hc != nil {
		c = *hc
	} else {
		c.Transport = NewTransport()
	}
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &c
}

// readBounded reads r (a limitedBody of limit bytes) to its end into one
// buffer that never grows past limit (json.Decoder's doubling would hold
// twice the limit), sized up front by a Content-Length within the limit.
func readBounded(r io.Reader, contentLength int64, limit int) ([]byte, error) {
	size := 4 << 10
	if contentLength >= 0 && contentLength < int64(limit) {
		size = int(contentLength) + 1
	}
	b := make([]byte, 0, min(size, limit+1))
	for {
		if len(b) == cap(b) {
			nc := min(max(2*cap(b), 4<<10), limit+1)
			if nc <= cap(b) {
				nc = cap(b) + 1 // only the one byte that tells the body is longer
			}
			nb := make([]byte, len(b), nc)
			copy(nb, b)
			b = nb
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if errors.Is(err, io.EOF) {
			return b, nil
		}
		if err != nil {
			return b, err
		}
	}
}
