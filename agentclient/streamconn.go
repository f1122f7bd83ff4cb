package agentclient

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
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
	// against 17 KB through net/http). The connection is closed when the
	// stream ends (a turn lasts far longer than a dial). Requests that are
	// not streams always use the pooled HTTPClient.
	//
	// It falls back to StreamNetHTTP when HTTPClient's transport is not an
	// *http.Transport, or when that transport's Proxy sends the base URL
	// through a proxy.
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
	dial func(ctx context.Context, network, addr string) (net.Conn, error)
	tls  *tls.Config // nil for http://
	addr string      // host:port
}

// newStreamConns returns nil when streams must go through net/http.
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
	if t.Proxy != nil {
		if u, err := t.Proxy(&http.Request{Method: http.MethodPost, URL: base, Header: http.Header{}}); err != nil || u != nil {
			return nil
		}
	}
	sc := &streamConns{dial: t.DialContext, addr: canonicalAddr(base)}
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

// roundTrip sends req on a new connection and reads the response head with
// br, a headReaders reader the caller puts back once it has taken the body
// bytes br holds: the body follows on the connection, which the caller
// reads and closes. While roundTrip runs, the end of req's context closes
// the connection, and it fails with the context's error, as net/http does;
// once it has returned, the connection no longer depends on that context.
func (sc *streamConns) roundTrip(req *http.Request) (conn net.Conn, resp *http.Response, br *bufio.Reader, err error) {
	ctx := req.Context()
	raw, err := sc.dial(ctx, "tcp", sc.addr)
	if err != nil {
		return nil, nil, nil, ctxErr(ctx, err)
	}
	var once sync.Once
	closeConn := func() { once.Do(func() { _ = raw.Close() }) }
	stop := context.AfterFunc(ctx, closeConn)
	fail := func(err error) (net.Conn, *http.Response, *bufio.Reader, error) {
		stop()
		closeConn()
		if br != nil {
			br.Reset(nil)
			headReaders.Put(br)
		}
		return nil, nil, nil, ctxErr(ctx, err)
	}
	conn = raw
	if sc.tls != nil {
		tc := tls.Client(raw, sc.tls)
		if err := tc.HandshakeContext(ctx); err != nil {
			return fail(err)
		}
		conn = tc
	}
	// One request per connection: the server closes it after the response,
	// and the body ends at the last chunk (or at the close).
	req.Close = true
	bw := requestWriters.Get().(*bufio.Writer)
	bw.Reset(conn)
	err = req.Write(bw)
	if err == nil {
		err = bw.Flush()
	}
	bw.Reset(nil)
	requestWriters.Put(bw)
	if err != nil {
		return fail(err)
	}
	br = headReaders.Get().(*bufio.Reader)
	br.Reset(conn)
	for {
		resp, err := http.ReadResponse(br, req)
		if err != nil {
			return fail(err)
		}
		if resp.StatusCode >= 100 && resp.StatusCode < 200 && resp.StatusCode != http.StatusSwitchingProtocols {
			continue // 100 Continue, 103 Early Hints: the response follows
		}
		if !stop() {
			return fail(ctx.Err()) // the context ended: the connection is closing
		}
		return conn, resp, br, nil
	}
}

// ctxErr reports the context's error when the context ended: the failure
// was the connection closed under the read, not the peer.
func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// bodyFramingOf says how a response's body ends.
func bodyFramingOf(resp *http.Response) bodyDecoder {
	switch {
	case len(resp.TransferEncoding) > 0 && resp.TransferEncoding[0] == "chunked":
		return bodyDecoder{framing: framingChunked}
	case resp.ContentLength >= 0:
		return bodyDecoder{framing: framingLength, left: uint64(resp.ContentLength), done: resp.ContentLength == 0}
	}
	return bodyDecoder{}
}
