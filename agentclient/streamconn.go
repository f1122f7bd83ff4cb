package agentclient

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"
)

// StreamTransport says how streaming requests reach Letta.
type StreamTransport string

const (
	// StreamDedicated (the default) gives every stream a connection of its
	// own, written and read on the caller's goroutine: net/http's request
	// writer and response-head parser, then the body read and de-chunked by
	// the stream's reader. While the agent thinks a stream holds no
	// goroutine, and over plain TCP on unix no buffer either: it waits on
	// the connection's descriptor and takes a pooled buffer when bytes
	// arrive (BenchmarkOpenStreams: about 2 KB of heap per open stream,
	// against 17 KB through net/http). On unix, a stream that ended
	// cleanly leaves its connection for the next stream for up to 2 s,
	// as net/http keeps idle connections (see connPool); otherwise the
	// connection is closed when the stream ends. Requests that are not
	// streams always use the pooled HTTPClient.
	//
	// It falls back to StreamNetHTTP for the settings it does not
	// implement (see newStreamConns): HTTPClient's transport is not an
	// *http.Transport, its Proxy sends the base URL through a proxy, it
	// has a DialTLSContext or DialTLS (for https), MaxConnsPerHost,
	// ResponseHeaderTimeout or Protocols without HTTP/1, or HTTPClient has
	// a cookie Jar or a Timeout. It honours DialContext (or Dial), TLSClientConfig,
	// TLSHandshakeTimeout, MaxResponseHeaderBytes (10 MiB by default, 1xx
	// heads included), DisableKeepAlives and MaxIdleConnsPerHost.
	StreamDedicated StreamTransport = "dedicated"
	// StreamNetHTTP sends streams through HTTPClient like every other
	// request. net/http keeps two goroutines and 8 KiB of buffers per open
	// HTTP/1.1 connection, so each in-flight turn costs about 20 KiB more;
	// HTTP/2 (negotiated over TLS) multiplexes streams instead.
	StreamNetHTTP StreamTransport = "net/http"
)

// ParseStreamTransport checks a StreamTransport's name ("" is the default).
func ParseStreamTransport(s string) (StreamTransport, error) {
	switch StreamTransport(s) {
	case "", StreamDedicated:
		return StreamDedicated, nil
	case StreamNetHTTP:
		return StreamNetHTTP, nil
	}
	return "", fmt.Errorf("stream transport %q: want %q or %q", s, StreamDedicated, StreamNetHTTP)
}

// streamConns opens dedicated stream connections with the dialer and TLS
// settings of the client's *http.Transport.
type streamConns struct {
	dial         func(ctx context.Context, network, addr string) (net.Conn, error)
	tls          *tls.Config   // nil for http://
	tlsTimeout   time.Duration // the transport's TLSHandshakeTimeout; 0: none
	maxHeadBytes int64         // bound of the response heads of one request (1xx heads included)
	addr         string        // host:port
	idle         *connPool     // connections of finished streams; nil: none are kept
}

// newStreamConns returns nil when streams must go through net/http: the
// dedicated transport is HTTP/1.1 over the transport's dialer and TLS
// settings, and every setting it does not implement sends the streams
// through net/http instead of being ignored.
func newStreamConns(base *url.URL, hc *http.Client, mode StreamTransport) *streamConns {
	if mode == StreamNetHTTP {
		return nil
	}
	var t *http.Transport
	switch rt := hc.Transport.(type) {
	case nil:
		t = http.DefaultTransport.(*http.Transport)
	case *http.Transport:
		t = rt
	default:
		return nil // a custom RoundTripper wants to see every request
	}
	if !dedicatedHonours(base, hc, t) {
		return nil
	}
	sc := &streamConns{dial: t.DialContext, addr: canonicalAddr(base), idle: newConnPool(t),
		tlsTimeout: t.TLSHandshakeTimeout, maxHeadBytes: t.MaxResponseHeaderBytes}
	if sc.maxHeadBytes <= 0 {
		sc.maxHeadBytes = defaultMaxHeadBytes
	}
	if sc.dial == nil && t.Dial != nil {
		dial := t.Dial //lint:ignore SA1019 net/http honours the deprecated Dial too
		sc.dial = func(_ context.Context, network, addr string) (net.Conn, error) { return dial(network, addr) }
	}
	if sc.dial == nil {
		sc.dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	}
	if base.Scheme == "https" {
		cfg := &tls.Config{}
		if t.TLSClientConfig != nil {
			cfg = t.TLSClientConfig.Clone()
		}
		if cfg.ServerName == "" {
			cfg.ServerName = base.Hostname()
		}
		cfg.NextProtos = []string{"http/1.1"}
		if cfg.ClientSessionCache == nil {
			// A connection per stream: resume TLS sessions rather than
			// pay a full handshake for every turn.
			cfg.ClientSessionCache = tls.NewLRUClientSessionCache(64)
		}
		sc.tls = cfg
	}
	return sc
}

// defaultMaxHeadBytes is net/http's bound of a response's heads when
// Transport.MaxResponseHeaderBytes is 0.
const defaultMaxHeadBytes = 10 << 20

// dedicatedHonours reports whether the dedicated transport can send
// streams as t and hc would: not through a proxy, not with a TLS dialer of
// the caller's (certificate pinning, a custom handshake), not with cookies
// from a Jar, not under the client's Timeout (which Config asks to be 0),
// and not with the transport settings it does not implement (a cap on
// connections, a clock on the response head, protocols without HTTP/1).
func dedicatedHonours(base *url.URL, hc *http.Client, t *http.Transport) bool {
	if t.Proxy != nil {
		if u, err := t.Proxy(&http.Request{Method: http.MethodPost, URL: base, Header: http.Header{}}); err != nil || u != nil {
			return false
		}
	}
	if base.Scheme == "https" && (t.DialTLSContext != nil || t.DialTLS != nil) { //lint:ignore SA1019 DialTLS is honoured by net/http
		return false
	}
	if p := t.Protocols; p != nil && (!p.HTTP1() || base.Scheme == "http" && p.UnencryptedHTTP2()) {
		return false
	}
	return hc.Jar == nil && hc.Timeout <= 0 && t.MaxConnsPerHost <= 0 && t.ResponseHeaderTimeout <= 0
}

func canonicalAddr(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "https" {
			port = "443"
		}
	}
	return net.JoinHostPort(u.Hostname(), port)
}

// headReaders read response heads. The bytes of the body that come with the
// head move into the stream's reader (sseReader.prime), and the head reader
// goes back to the pool: a stream keeps none.
var headReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, readBufSize) }}

var requestWriters = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 2<<10) }}

// roundTrip sends req on an idle connection of an earlier stream, or on a
// new one, and reads the response head with ex.br, a headReaders reader
// the caller puts back once it has taken the body bytes it holds: the body
// follows on the connection, which the caller reads and then closes or
// offers back (release). The end of req's context closes the connection,
// and roundTrip fails with the context's error, as net/http does, until
// the caller calls ex.unhook: an error answer's body is read under that
// context too.
//
// A request on a reused connection can meet a server that closed it while
// it was idle (peek, when the connection was taken, sees a close that has
// arrived; not one that is still on its way). It is sent again, once, on a
// new connection in one case only: writing it failed before a single byte
// of it was written. That is net/http's rule for a request that is not
// idempotent (nothingWrittenError in transport.go's shouldRetryRequest):
// no byte of it reached the server, so the server cannot have acted on
// it, and the message cannot be sent twice. An EOF or a reset before the
// first byte of the response, once the request was written, is not
// retried: it is most likely the server's idle close racing the request,
// but a server that took the message and then died looks the same, and
// Letta's agent endpoint does not deduplicate by otid. net/http retries
// that case only for idempotent requests (errServerClosedIdle with
// isReplayable); a send is not one. The caller gets the transport error
// and decides as for any failed send (look for the otid first).
func (sc *streamConns) roundTrip(req *http.Request) (ex exchange, err error) {
	if conn := sc.idle.get(); conn != nil {
		ex, err = sc.send(req, conn, true)
		if !errors.Is(err, errNothingWritten) {
			return ex, err
		}
		if req.GetBody == nil {
			return exchange{}, err
		}
		if req.Body, err = req.GetBody(); err != nil {
			return exchange{}, err
		}
	}
	ctx := req.Context()
	raw, err := sc.dial(ctx, "tcp", sc.addr)
	if err != nil {
		return exchange{}, ctxErr(ctx, err)
	}
	return sc.send(req, raw, false)
}

// exchange is a request sent and its response head read: the connection
// the body follows on, the head reader holding the body's first bytes,
// and unhook, which stops the end of the request's context from closing
// the connection. Until unhook is called that context still bounds
// everything read on the connection (an error answer's body, see
// Client.apiError); unhook reports false when the context ended first
// (the connection is closing).
type exchange struct {
	conn   net.Conn
	resp   *http.Response
	br     *bufio.Reader
	unhook func() bool
}

// headLimit bounds the bytes read for a request's response heads, as
// net/http's persistConn.readLimit does: all of them, 1xx heads included,
// count against the transport's MaxResponseHeaderBytes; once the final
// head is read, the body is read without it.
type headLimit struct {
	r io.Reader
	n int64
}

func (l *headLimit) Read(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, errHeadTooLong
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	return n, err
}

var errHeadTooLong = errors.New("response head too long")

// tlsHandshakeTimeout is net/http's error for a handshake that took longer
// than TLSHandshakeTimeout.
type tlsHandshakeTimeout struct{}

func (tlsHandshakeTimeout) Error() string   { return "net/http: TLS handshake timeout" }
func (tlsHandshakeTimeout) Timeout() bool   { return true }
func (tlsHandshakeTimeout) Temporary() bool { return true }

// errNothingWritten marks the failure of a request on a reused connection
// of which no byte was written.
var errNothingWritten = errors.New("nothing written on a reused connection")

type nothingWritten struct{ err error }

func (e nothingWritten) Error() string        { return e.err.Error() }
func (e nothingWritten) Unwrap() []error      { return []error{e.err, errNothingWritten} }
func (e nothingWritten) Is(target error) bool { return target == errNothingWritten }

// countingWriter counts the bytes written to a connection.
type countingWriter struct {
	w net.Conn
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// send writes req on raw, a new connection (over TLS the handshake is made
// here) or a reused one (its TLS connection, already set up), and reads
// the response head. On failure the connection is closed.
func (sc *streamConns) send(req *http.Request, raw net.Conn, reused bool) (ex exchange, err error) {
	ctx := req.Context()
	var once sync.Once
	closeConn := func() { once.Do(func() { _ = raw.Close() }) }
	stop := context.AfterFunc(ctx, closeConn)
	var br *bufio.Reader
	fail := func(err error) (exchange, error) {
		stop()
		closeConn()
		if br != nil {
			br.Reset(nil)
			headReaders.Put(br)
		}
		return exchange{}, ctxErr(ctx, err)
	}
	conn := raw
	if sc.tls != nil && !reused {
		tc := tls.Client(raw, sc.tls)
		if err := sc.handshake(ctx, tc); err != nil {
			return fail(err)
		}
		conn = tc
	}
	// Without a pool the connection carries one request: say so, and the
	// server closes it after the response.
	req.Close = sc.idle == nil
	cw := countingWriter{w: conn}
	bw := requestWriters.Get().(*bufio.Writer)
	bw.Reset(&cw)
	err = req.Write(bw)
	if err == nil {
		err = bw.Flush()
	}
	bw.Reset(nil)
	requestWriters.Put(bw)
	if err != nil {
		if reused && cw.n == 0 && ctx.Err() == nil {
			err = nothingWritten{err}
		}
		return fail(err)
	}
	limit := &headLimit{r: conn, n: sc.maxHeadBytes}
	br = headReaders.Get().(*bufio.Reader)
	br.Reset(limit)
	for {
		resp, err := http.ReadResponse(br, req)
		if err != nil {
			if limit.n <= 0 {
				err = fmt.Errorf("net/http: server response headers exceeded %d bytes; aborted", sc.maxHeadBytes)
			}
			return fail(err)
		}
		if resp.StatusCode >= 100 && resp.StatusCode < 200 && resp.StatusCode != http.StatusSwitchingProtocols {
			continue // 100 Continue, 103 Early Hints: the response follows
		}
		limit.n = math.MaxInt64
		return exchange{conn: conn, resp: resp, br: br, unhook: stop}, nil
	}
}

// handshake makes tc's TLS handshake, bounded by the transport's
// TLSHandshakeTimeout as net/http bounds it.
func (sc *streamConns) handshake(ctx context.Context, tc *tls.Conn) error {
	if sc.tlsTimeout <= 0 {
		return tc.HandshakeContext(ctx)
	}
	hctx, cancel := context.WithTimeoutCause(ctx, sc.tlsTimeout, tlsHandshakeTimeout{})
	defer cancel()
	err := tc.HandshakeContext(hctx)
	if err != nil && ctx.Err() == nil && errors.Is(context.Cause(hctx), tlsHandshakeTimeout{}) {
		return tlsHandshakeTimeout{}
	}
	return err
}

// reusable says whether a response's connection may carry another request
// once the response was read to its end: HTTP/1.1, no "Connection: close"
// (http.ReadResponse sets Close for that and for HTTP/1.0 without
// keep-alive), and a body whose end is framed (not the connection's close).
func reusable(resp *http.Response) bool {
	return resp.ProtoAtLeast(1, 1) && !resp.Close &&
		(resp.ContentLength >= 0 || (len(resp.TransferEncoding) > 0 && resp.TransferEncoding[0] == "chunked"))
}

// release offers the connection of a stream read cleanly to its last
// event to the next stream, or closes it. rd is the stream's reader, done
// with the body's framing state and the raw bytes it had not decoded.
func (sc *streamConns) release(conn net.Conn, rd *sseReader) {
	if rd.err == nil || rd.err == io.EOF && rd.dec.done {
		var carry []byte
		if !rd.dec.done && rd.buf != nil {
			carry = rd.buf[rd.w:rd.raw]
		}
		if sc.idle.put(conn, rd.dec, carry) {
			return
		}
	}
	_ = conn.Close()
}

// ctxErr reports the context's error when the context ended: the failure
// was the connection closed under the read, not the peer.
func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// bodyFramingOf says how a response's body ends. A response that has no
// body for http.ReadResponse (Content-Length: 0, 204, 304) has none here
// either, whatever else its head says.
func bodyFramingOf(resp *http.Response) bodyDecoder {
	switch {
	case resp.Body == http.NoBody:
		return bodyDecoder{framing: framingLength, done: true, end: true}
	case len(resp.TransferEncoding) > 0 && resp.TransferEncoding[0] == "chunked":
		return bodyDecoder{framing: framingChunked}
	case resp.ContentLength >= 0:
		empty := resp.ContentLength == 0
		return bodyDecoder{framing: framingLength, left: uint64(resp.ContentLength), done: empty, end: empty}
	}
	return bodyDecoder{}
}
