package agentclient

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// goroutinesIn counts the goroutines whose stack mentions fn.
func goroutinesIn(t *testing.T, fn string) int {
	t.Helper()
	var b strings.Builder
	if err := pprof.Lookup("goroutine").WriteTo(&b, 2); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, g := range strings.Split(b.String(), "\n\n") {
		if strings.Contains(g, fn) {
			n++
		}
	}
	return n
}

// An open dedicated stream is read on the caller's goroutine: net/http runs
// no connection goroutines for it. Through net/http it runs two per stream;
// that difference is what the dedicated transport is for.
func TestDedicatedStreamsRunNoConnectionGoroutines(t *testing.T) {
	const streams = 8
	for _, tc := range []struct {
		tr      StreamTransport
		atLeast int // persistConn goroutines while the streams are open
		atMost  int
	}{
		{StreamDedicated, 0, 0},
		{StreamNetHTTP, 2 * streams, 1 << 20},
	} {
		t.Run(strings.ReplaceAll(string(tc.tr), "/", ""), func(t *testing.T) {
			leakCheck(t)
			release := releaseOnCleanup(t)
			rs := newRaw(t, func(w http.ResponseWriter, r *http.Request) {
				startSSE(w)
				sse(w, data(fxPing))
				block(r, release)
			})
			c := newClient(t, tc.tr, rs.URL, Clocks{ContentIdle: -1})
			ctx, cancel := context.WithCancel(context.Background())
			var started, done sync.WaitGroup
			for range streams {
				started.Add(1)
				done.Add(1)
				go func() {
					defer done.Done()
					var once sync.Once
					_ = c.SendStream(ctx, sendReq(), NewStreamState(), StreamOptions{OnEvent: func(Event) { once.Do(started.Done) }})
				}()
			}
			started.Wait() // every stream has its first event and is now blocked reading
			n := goroutinesIn(t, "net/http.(*persistConn)")
			cancel()
			done.Wait()
			if n < tc.atLeast || n > tc.atMost {
				t.Fatalf("%d streams open over %s: %d net/http connection goroutines, want %d..%d", streams, tc.tr, n, tc.atLeast, tc.atMost)
			}
		})
	}
}

// What the dedicated transport puts on the wire is a plain HTTP/1.1 request
// that keeps the connection open for the next stream (where idle
// connections are kept: unix).
func TestDedicatedStreamRequest(t *testing.T) {
	leakCheck(t)
	reqs := make(chan *http.Request, 1)
	rs := newRaw(t, func(w http.ResponseWriter, r *http.Request) {
		reqs <- r
		startSSE(w)
		sse(w, data(fxAssistant), data(fxStop), data("[DONE]"))
	})
	c := newClient(t, StreamDedicated, rs.URL+"/prefix", Clocks{})
	st := NewStreamState()
	if err := c.SendStream(context.Background(), sendReq(), st, StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	if st.Answer() == "" {
		t.Fatal("no answer read")
	}
	got := <-reqs
	if got.Method != http.MethodPost || got.URL.Path != "/prefix/v1/agents/agent-1/messages/stream" || got.ProtoMajor != 1 || got.Close != (c.sc.idle == nil) {
		t.Errorf("request: %s %s %s close=%v", got.Method, got.URL.Path, got.Proto, got.Close)
	}
	h := rs.headers[0]
	for k, want := range map[string]string{"Authorization": "Bearer sk-secret-key-123", "Content-Type": "application/json",
		"Accept": "text/event-stream", "User-Agent": DefaultUserAgent} {
		if h.Get(k) != want {
			t.Errorf("header %s = %q, want %q", k, h.Get(k), want)
		}
	}
	if msgs, _ := rs.bodies[0]["messages"].([]any); len(msgs) != 1 {
		t.Errorf("body: %v", rs.bodies[0])
	}
}

// Over TLS the dedicated transport uses the HTTP client's TLS settings (here
// the test server's root) and speaks HTTP/1.1.
func TestDedicatedStreamOverTLS(t *testing.T) {
	leakCheck(t)
	protos := make(chan string, 3)
	resumed := make(chan bool, 3)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		protos <- r.Proto
		resumed <- r.TLS.DidResume
		startSSE(w)
		sse(w, data(fxAssistant), data(fxStop), data("[DONE]"))
	}))
	var conns atomic.Int32
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the untrusted handshake below is expected
	srv.StartTLS()
	t.Cleanup(srv.Close)
	hc := srv.Client()
	t.Cleanup(hc.CloseIdleConnections)
	c, err := New(Config{BaseURL: srv.URL, HTTPClient: hc})
	if err != nil {
		t.Fatal(err)
	}
	if c.StreamTransport() != StreamDedicated {
		t.Fatalf("stream transport %q", c.StreamTransport())
	}
	st := NewStreamState()
	if err := c.SendStream(context.Background(), sendReq(), st, StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	if proto := <-protos; proto != "HTTP/1.1" || st.Answer() == "" {
		t.Fatalf("proto %q, answer %q", proto, st.Answer())
	}
	// The next stream reuses the connection; after the idle connections
	// are closed, the next is a new connection that resumes the TLS session.
	if err := c.SendStream(context.Background(), sendReq(), NewStreamState(), StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("two streams over TLS made %d connections, want 1", n)
	}
	c.CloseIdleConnections()
	if err := c.SendStream(context.Background(), sendReq(), NewStreamState(), StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	<-protos
	<-protos
	if first, _, third := <-resumed, <-resumed, <-resumed; first || !third {
		t.Errorf("TLS resumption: first stream resumed %v, third %v; want false, true", first, third)
	}
	c.CloseIdleConnections()

	// Without the test root the handshake fails, as a transport error.
	c2, _ := New(Config{BaseURL: srv.URL})
	err = c2.SendStream(context.Background(), sendReq(), NewStreamState(), StreamOptions{})
	var ae *Error
	if !errors.As(err, &ae) || ae.StatusCode != 0 || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("untrusted server: %v", err)
	}
}

type countingRT struct{ n int }

func (c *countingRT) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n++
	return http.DefaultTransport.RoundTrip(r)
}

// A proxy or a custom RoundTripper keeps streams on net/http.
func TestDedicatedFallsBackToNetHTTP(t *testing.T) {
	proxied := NewTransport()
	proxied.Proxy = http.ProxyURL(&url.URL{Scheme: "http", Host: "proxy.invalid:3128"})
	for name, hc := range map[string]*http.Client{
		"proxy":        {Transport: proxied},
		"roundtripper": {Transport: &countingRT{}},
	} {
		c, err := New(Config{BaseURL: "http://letta.example:8283", HTTPClient: hc})
		if err != nil {
			t.Fatal(err)
		}
		if c.StreamTransport() != StreamNetHTTP {
			t.Errorf("%s: streams over %q, want net/http", name, c.StreamTransport())
		}
	}
	// A proxy that does not apply to the host (NO_PROXY) does not.
	direct := NewTransport()
	direct.Proxy = func(*http.Request) (*url.URL, error) { return nil, nil }
	c, _ := New(Config{BaseURL: "http://letta.example:8283", HTTPClient: &http.Client{Transport: direct}})
	if c.StreamTransport() != StreamDedicated {
		t.Errorf("no proxy for the host: streams over %q", c.StreamTransport())
	}
	if _, err := New(Config{StreamTransport: "h3"}); err == nil || !strings.Contains(err.Error(), `"h3"`) {
		t.Errorf("unknown stream transport accepted: %v", err)
	}

	// The custom RoundTripper does see the stream.
	leakCheck(t)
	rs := newRaw(t, func(w http.ResponseWriter, r *http.Request) {
		startSSE(w)
		sse(w, data(fxAssistant), data(fxStop))
	})
	rt := &countingRT{}
	c, _ = New(Config{BaseURL: rs.URL, HTTPClient: &http.Client{Transport: rt}})
	if err := c.SendStream(context.Background(), sendReq(), NewStreamState(), StreamOptions{}); err != nil || rt.n != 1 {
		t.Fatalf("err %v, round trips %d", err, rt.n)
	}
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
}

// Informational answers before the response are skipped; a redirect is not
// followed (a POST must not turn into a GET or go elsewhere) and says where
// it points.
func TestDedicatedInformationalAndRedirect(t *testing.T) {
	eachTransport(t, func(t *testing.T, tr StreamTransport) {
		leakCheck(t)
		rs := newRaw(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Link", "</x>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			startSSE(w)
			sse(w, data(fxAssistant), data(fxStop))
		}, func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "https://letta.example/v1/agents/agent-1/messages/stream", http.StatusPermanentRedirect)
		})
		c := newClient(t, tr, rs.URL, Clocks{})
		st := NewStreamState()
		if err := c.SendStream(context.Background(), sendReq(), st, StreamOptions{}); err != nil || st.Answer() == "" {
			t.Fatalf("after 103: err %v, answer %q", err, st.Answer())
		}
		if tr == StreamNetHTTP {
			return // net/http follows redirects; only the dedicated transport is checked
		}
		err := c.SendStream(context.Background(), sendReq(), NewStreamState(), StreamOptions{})
		var ae *Error
		if !errors.As(err, &ae) || ae.StatusCode != http.StatusPermanentRedirect || Classify(err) != Permanent ||
			!strings.Contains(err.Error(), "redirected to https://letta.example/") {
			t.Fatalf("redirect: %v", err)
		}
	})
}

// Cancelling while the server has not answered closes the connection (the
// server sees it) and reports the cancellation, not a transport failure.
func TestDedicatedCancelBeforeHeaders(t *testing.T) {
	leakCheck(t)
	gone := make(chan struct{})
	arrived := make(chan struct{})
	rs := newRaw(t, func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		<-r.Context().Done()
		close(gone)
	})
	c := newClient(t, StreamDedicated, rs.URL, Clocks{})
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-arrived; cancel() }()
	err := c.SendStream(ctx, sendReq(), NewStreamState(), StreamOptions{})
	var se *StreamError
	if !errors.As(err, &se) || se.Clock != ClockCanceled || Classify(err) != Canceled {
		t.Fatalf("err = %v", err)
	}
	select {
	case <-gone:
	case <-time.After(5 * time.Second):
		t.Fatal("the server never saw the connection close")
	}
}

// rawHTTP serves each connection the bytes of one response, written in
// pieces of n bytes (the request is read first).
func rawHTTP(t *testing.T, resp string, n int) string {
	t.Helper()
	return serveRaw(t, func(c net.Conn, _ <-chan struct{}) {
		for b := []byte(resp); len(b) > 0; {
			k := min(n, len(b))
			if _, err := c.Write(b[:k]); err != nil {
				return
			}
			b = b[k:]
		}
	})
}

// chunkBody is body in chunked framing: chunks of size bytes (the last
// shorter), each size line followed by ext, then the last chunk.
func chunkBody(body string, size int, ext string) string {
	var b strings.Builder
	for len(body) > 0 {
		k := min(size, len(body))
		fmt.Fprintf(&b, "%x%s\r\n%s\r\n", k, ext, body[:k])
		body = body[k:]
	}
	b.WriteString("0\r\n\r\n")
	return b.String()
}

// serveRaw accepts connections on a loopback port; for each, it reads one
// request and hands the connection to answer, which writes the response
// (done is closed when the test ends), then closes it.
func serveRaw(t *testing.T, answer func(c net.Conn, done <-chan struct{})) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	t.Cleanup(func() { close(done); _ = ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
					return
				}
				answer(c, done)
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}

// A dedicated stream reads the body itself: chunked, by Content-Length, or
// until the connection closes, whatever the pieces it arrives in.
func TestDedicatedStreamBodyFramings(t *testing.T) {
	body := data(fxPing) + data(fxAssistant) + data(fxStop) + data("[DONE]")
	chunked := chunkBody(body, 37, ";ext=1")
	head := "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
	for name, resp := range map[string]string{
		"chunked":        head + "Transfer-Encoding: chunked\r\n\r\n" + chunked,
		"content-length": head + "Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body + "trailing junk",
		"until close":    head + "Connection: close\r\n\r\n" + body,
	} {
		for _, n := range []int{1, 5, 4096} {
			t.Run(fmt.Sprintf("%s/%d", name, n), func(t *testing.T) {
				leakCheck(t)
				c := newClient(t, StreamDedicated, rawHTTP(t, resp, n), Clocks{})
				st := NewStreamState()
				if err := c.SendStream(context.Background(), sendReq(), st, StreamOptions{}); err != nil {
					t.Fatal(err)
				}
				if s := st.Snapshot(); s.Answer != "Here you go" || s.StopReason != "end_turn" || !s.Done || s.Pings != 1 {
					t.Fatalf("answer %q, stop %q, done %v, pings %d", s.Answer, s.StopReason, s.Done, s.Pings)
				}
			})
		}
	}
	// A chunked body cut before its last chunk, and a malformed one, are
	// cut streams, as they are over net/http.
	for name, resp := range map[string]string{
		"cut":       head + "Transfer-Encoding: chunked\r\n\r\n" + strings.TrimSuffix(chunked, "0\r\n\r\n")[:60],
		"malformed": head + "Transfer-Encoding: chunked\r\n\r\n" + "5\nhello\r\n",
	} {
		t.Run(name, func(t *testing.T) {
			leakCheck(t)
			c := newClient(t, StreamDedicated, rawHTTP(t, resp, 7), Clocks{})
			err := c.SendStream(context.Background(), sendReq(), NewStreamState(), StreamOptions{})
			if Classify(err) != Retryable || IsProtocolError(err) {
				t.Fatalf("err = %v", err)
			}
		})
	}
}
