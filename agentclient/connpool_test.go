package agentclient

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// countingServer is an HTTP server that counts the connections it
// accepts and the requests it serves.
type countingServer struct {
	*httptest.Server
	conns, closed, reqs atomic.Int32
	closedCh            chan struct{} // gets a value when a connection closes
}

func newCountingServer(t *testing.T, h http.HandlerFunc) *countingServer {
	t.Helper()
	cs := &countingServer{closedCh: make(chan struct{}, 64)}
	cs.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cs.reqs.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		h(w, r)
	}))
	cs.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			cs.conns.Add(1)
		case http.StateClosed, http.StateHijacked:
			cs.closed.Add(1)
			cs.closedCh <- struct{}{}
		}
	}
	cs.Start()
	t.Cleanup(cs.Close)
	return cs
}

func answer(w http.ResponseWriter, _ *http.Request) {
	startSSE(w)
	sse(w, data(fxPing), data(fxAssistant), data(fxStop), data("[DONE]"))
}

func sendOK(t *testing.T, c *Client) {
	t.Helper()
	st := NewStreamState()
	if err := c.SendStream(context.Background(), sendReq(), st, StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	if st.Answer() != "Here you go" {
		t.Fatalf("answer %q", st.Answer())
	}
}

// Streams one after the other share one connection, whatever ends the
// body: [DONE] then the last chunk, the last chunk with no [DONE], a
// Content-Length body. CloseIdleConnections closes it.
func TestDedicatedStreamsReuseConnection(t *testing.T) {
	body := data(fxPing) + data(fxAssistant) + data(fxStop) + data("[DONE]")
	for name, h := range map[string]http.HandlerFunc{
		"chunked": answer,
		"chunked, no [DONE]": func(w http.ResponseWriter, r *http.Request) {
			startSSE(w)
			sse(w, data(fxPing), data(fxAssistant), data(fxStop))
		},
		"trailer": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Trailer", "X-Run")
			startSSE(w)
			sse(w, data(fxPing), data(fxAssistant), data(fxStop), data("[DONE]"))
			w.Header().Set("X-Run", "run-1")
		},
		"content-length": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			w.Header().Set("Content-Length", strconv.Itoa(len(body)))
			_, _ = io.WriteString(w, body)
		},
	} {
		t.Run(name, func(t *testing.T) {
			leakCheck(t)
			cs := newCountingServer(t, h)
			c := newClient(t, StreamDedicated, cs.URL, Clocks{})
			const n = 5
			for range n {
				sendOK(t, c)
			}
			if got, reqs := cs.conns.Load(), cs.reqs.Load(); got != 1 || reqs != n {
				t.Fatalf("%d streams: %d connections, %d requests; want 1, %d", n, got, reqs, n)
			}
			if c.sc.idle.len() != 1 {
				t.Fatalf("idle connections: %d", c.sc.idle.len())
			}
			c.CloseIdleConnections()
			<-cs.closedCh // the server sees the connection close
			if c.sc.idle.len() != 0 {
				t.Fatal("CloseIdleConnections left idle connections")
			}
		})
	}
}

// The idle connections are bounded by the transport's MaxIdleConnsPerHost,
// and are not reused after idleReuse.
func TestDedicatedIdleConnectionsBounded(t *testing.T) {
	leakCheck(t)
	release := make(chan struct{})
	var arrived sync.WaitGroup
	cs := newCountingServer(t, func(w http.ResponseWriter, r *http.Request) {
		arrived.Done()
		<-release
		answer(w, r)
	})
	tr := NewTransport()
	tr.MaxIdleConnsPerHost = 2
	c, err := New(Config{BaseURL: cs.URL, HTTPClient: &http.Client{Transport: tr}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.CloseIdleConnections)
	const streams = 5
	arrived.Add(streams)
	var wg sync.WaitGroup
	for range streams {
		wg.Go(func() { sendOK(t, c) })
	}
	arrived.Wait()
	close(release)
	wg.Wait()
	if n := c.sc.idle.len(); n != 2 {
		t.Fatalf("%d streams ended together: %d idle connections kept, want 2", streams, n)
	}
	for range streams - 2 {
		<-cs.closedCh // the others were closed
	}

	// Connections idle for idleReuse are not used: the next stream dials.
	c.sc.idle.mu.Lock()
	for _, ic := range c.sc.idle.idle {
		ic.since = ic.since.Add(-idleReuse)
	}
	c.sc.idle.mu.Unlock()
	before := cs.conns.Load()
	arrived.Add(1)
	sendOK(t, c)
	if got := cs.conns.Load(); got != before+1 {
		t.Fatalf("after idleReuse: %d new connections, want 1", got-before)
	}
	// The timer closes expired connections.
	c.sc.idle.mu.Lock()
	for _, ic := range c.sc.idle.idle {
		ic.since = ic.since.Add(-idleReuse)
	}
	c.sc.idle.mu.Unlock()
	c.sc.idle.expire()
	if n := c.sc.idle.len(); n != 0 {
		t.Fatalf("%d idle connections after expire", n)
	}
}

// A server that says "Connection: close", or answers HTTP/1.0, or ends
// the body with the connection, has its connection closed after each
// stream.
func TestDedicatedConnectionCloseHonoured(t *testing.T) {
	leakCheck(t)
	cs := newCountingServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		answer(w, r)
	})
	c := newClient(t, StreamDedicated, cs.URL, Clocks{})
	for range 3 {
		sendOK(t, c)
	}
	if n := cs.conns.Load(); n != 3 {
		t.Fatalf("Connection: close: 3 streams made %d connections, want 3", n)
	}
	body := data(fxPing) + data(fxAssistant) + data(fxStop) + data("[DONE]")
	for name, resp := range map[string]string{
		"http/1.0":    "HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body,
		"until close": "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n" + body,
	} {
		t.Run(name, func(t *testing.T) {
			srv := newConnServer(t, func(conn net.Conn, br *bufio.Reader, n int) bool {
				_, _ = io.WriteString(conn, resp)
				return false
			})
			c := newClient(t, StreamDedicated, srv.url, Clocks{})
			for range 2 {
				sendOK(t, c)
			}
			if n := srv.conns.Load(); n != 2 || c.sc.idle.len() != 0 {
				t.Fatalf("2 streams: %d connections, %d idle; want 2, 0", n, c.sc.idle.len())
			}
		})
	}
}

// connServer serves raw HTTP/1.1: serve is called for each request read on
// a connection (n counts them from 1) and says whether to read another.
type connServer struct {
	url   string
	conns atomic.Int32
	reqs  atomic.Int32
}

func newConnServer(t *testing.T, serve func(conn net.Conn, br *bufio.Reader, n int) bool) *connServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cs := &connServer{url: "http://" + ln.Addr().String()}
	var wg sync.WaitGroup
	t.Cleanup(func() { _ = ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			cs.conns.Add(1)
			wg.Go(func() {
				defer conn.Close()
				br := bufio.NewReader(conn)
				for n := 1; ; n++ {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					_, _ = io.Copy(io.Discard, req.Body)
					cs.reqs.Add(1)
					if !serve(conn, br, n) {
						return
					}
				}
			})
		}
	})
	return cs
}

func chunkedAnswer() string {
	body := data(fxPing) + data(fxAssistant) + data(fxStop) + data("[DONE]")
	return "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n" +
		fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(body), body)
}

// A server that closes a connection while it is idle (its keep-alive
// timeout): the next stream goes on a new connection, and the server sees
// each message once.
func TestDedicatedServerClosedIdleConnection(t *testing.T) {
	leakCheck(t)
	closed := make(chan struct{}, 4)
	srv := newConnServer(t, func(conn net.Conn, br *bufio.Reader, n int) bool {
		_, _ = io.WriteString(conn, chunkedAnswer())
		// The keep-alive timeout, at once: close after the response.
		_ = conn.Close()
		closed <- struct{}{}
		return false
	})
	c := newClient(t, StreamDedicated, srv.url, Clocks{})
	for range 3 {
		sendOK(t, c)
		<-closed // the server has closed the connection, idle
	}
	if conns, reqs := srv.conns.Load(), srv.reqs.Load(); conns != 3 || reqs != 3 {
		t.Fatalf("3 streams: %d connections, %d requests; want 3, 3", conns, reqs)
	}
}

// A request on a reused connection that the server reads and then closes
// without a byte of answer is not sent again: the server may have acted on
// it (the agent endpoint does not deduplicate). The stream fails as a
// transport failure of the send, and the server saw the message once.
func TestDedicatedNoResendAfterWrite(t *testing.T) {
	leakCheck(t)
	srv := newConnServer(t, func(conn net.Conn, br *bufio.Reader, n int) bool {
		if n == 1 {
			_, _ = io.WriteString(conn, chunkedAnswer())
			return true
		}
		return false // the second request: read, then the connection closes
	})
	c := newClient(t, StreamDedicated, srv.url, Clocks{})
	sendOK(t, c)
	err := c.SendStream(context.Background(), sendReq(), NewStreamState(), StreamOptions{})
	var ae *Error
	if !errors.As(err, &ae) || ae.StatusCode != 0 || Classify(err) != Retryable {
		t.Fatalf("second stream: %v", err)
	}
	if conns, reqs := srv.conns.Load(), srv.reqs.Load(); conns != 1 || reqs != 2 {
		t.Fatalf("%d connections, %d requests; want 1, 2 (no resend)", conns, reqs)
	}
}

// failWrites is a connection whose writes fail before writing anything.
type failWrites struct {
	net.Conn
	writes atomic.Int32
}

func (f *failWrites) Write([]byte) (int, error) {
	f.writes.Add(1)
	return 0, errors.New("broken pipe")
}

// A request of which no byte could be written on a reused connection is
// sent again, once, on a new connection: the server cannot have seen it.
func TestDedicatedRetryNothingWritten(t *testing.T) {
	leakCheck(t)
	cs := newCountingServer(t, answer)
	c := newClient(t, StreamDedicated, cs.URL, Clocks{})
	sendOK(t, c)
	if c.sc.idle.len() != 1 {
		t.Fatal("no idle connection")
	}
	// Make the idle connection's writes fail (its reads, and peek, still
	// see an open connection).
	c.sc.idle.mu.Lock()
	ic := c.sc.idle.idle[0]
	fw := &failWrites{Conn: ic.conn}
	ic.conn = fw
	c.sc.idle.mu.Unlock()
	st := NewStreamState()
	if err := c.SendStream(context.Background(), sendReq(), st, StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	if fw.writes.Load() == 0 {
		t.Fatal("the reused connection was not tried")
	}
	if conns, reqs := cs.conns.Load(), cs.reqs.Load(); conns != 2 || reqs != 2 {
		t.Fatalf("%d connections, %d requests; want 2, 2", conns, reqs)
	}
}

// A stream abandoned before its end (the caller cancelled, a clock fired,
// an event over the limit, an error event) never leaves its connection for
// the next stream.
func TestDedicatedAbandonedStreamNotReused(t *testing.T) {
	for name, tc := range map[string]struct {
		h   func(release <-chan struct{}) http.HandlerFunc
		opt func(cancel context.CancelFunc) StreamOptions
	}{
		"cancelled": {
			h: func(release <-chan struct{}) http.HandlerFunc {
				return func(w http.ResponseWriter, r *http.Request) {
					startSSE(w)
					sse(w, data(fxPing), data(fxAssistant))
					block(r, release)
				}
			},
			opt: func(cancel context.CancelFunc) StreamOptions {
				return StreamOptions{OnEvent: func(e Event) {
					if _, ok := e.Message.(*AssistantMessage); ok {
						cancel()
					}
				}}
			},
		},
		"stall clock": {
			h: func(release <-chan struct{}) http.HandlerFunc {
				return func(w http.ResponseWriter, r *http.Request) {
					startSSE(w)
					sse(w, data(fxPing))
					block(r, release)
				}
			},
			opt: func(context.CancelFunc) StreamOptions {
				return StreamOptions{Clocks: Clocks{Stall: 50 * time.Millisecond}}
			},
		},
		"stop grace": {
			h: func(release <-chan struct{}) http.HandlerFunc {
				return func(w http.ResponseWriter, r *http.Request) {
					startSSE(w)
					sse(w, data(fxPing), data(fxAssistant), data(fxStop))
					block(r, release)
				}
			},
			opt: func(context.CancelFunc) StreamOptions {
				return StreamOptions{Clocks: Clocks{StopGrace: 20 * time.Millisecond}}
			},
		},
		"error event": {
			h: func(<-chan struct{}) http.HandlerFunc {
				return func(w http.ResponseWriter, r *http.Request) {
					startSSE(w)
					sse(w, data(fxPing), "event: error\ndata: {\"error\":\"boom\",\"code\":\"INTERNAL_SERVER_ERROR\"}\n\n")
				}
			},
			opt: func(context.CancelFunc) StreamOptions { return StreamOptions{} },
		},
	} {
		t.Run(name, func(t *testing.T) {
			leakCheck(t)
			release := releaseOnCleanup(t)
			var calls atomic.Int32
			h := tc.h(release)
			cs := newCountingServer(t, func(w http.ResponseWriter, r *http.Request) {
				if calls.Add(1) == 1 {
					h(w, r)
					return
				}
				answer(w, r)
			})
			c := newClient(t, StreamDedicated, cs.URL, Clocks{})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			_ = c.SendStream(ctx, sendReq(), NewStreamState(), tc.opt(cancel))
			if n := c.sc.idle.len(); n != 0 {
				t.Fatalf("%d idle connections after an abandoned stream", n)
			}
			sendOK(t, c)
			if n := cs.conns.Load(); n != 2 {
				t.Fatalf("%d connections, want 2: the abandoned one was reused", n)
			}
		})
	}
}

// A response whose end is followed by bytes no request asked for, or whose
// trailer is malformed, does not leave its connection.
func TestDedicatedUnsolicitedBytesNotReused(t *testing.T) {
	for name, extra := range map[string]string{
		"bytes after the end": "HTTP/1.1 200 OK\r\n",
		"malformed trailer":   "X: y\n\r\n",
	} {
		t.Run(name, func(t *testing.T) {
			leakCheck(t)
			resp := chunkedAnswer()
			if strings.HasPrefix(extra, "X") {
				resp = strings.TrimSuffix(resp, "\r\n") + extra
			} else {
				resp += extra
			}
			srv := newConnServer(t, func(conn net.Conn, br *bufio.Reader, n int) bool {
				_, _ = io.WriteString(conn, resp)
				return true
			})
			c := newClient(t, StreamDedicated, srv.url, Clocks{})
			for range 2 {
				sendOK(t, c)
			}
			if n := srv.conns.Load(); n != 2 {
				t.Fatalf("%d connections, want 2", n)
			}
		})
	}
}

// The rest of a response's end that arrives after its last event (here
// the last chunk, a moment later) is read when the connection is taken.
func TestDedicatedLateEndFinishedOnReuse(t *testing.T) {
	leakCheck(t)
	sent := make(chan struct{})
	next := make(chan struct{})
	srv := newConnServer(t, func(conn net.Conn, br *bufio.Reader, n int) bool {
		body := data(fxPing) + data(fxAssistant) + data(fxStop) + data("[DONE]")
		_, _ = fmt.Fprintf(conn, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n", len(body), body)
		if n == 1 {
			<-next
		}
		_, _ = io.WriteString(conn, "0\r\n\r\n")
		if n == 1 {
			sent <- struct{}{}
		}
		return true
	})
	c := newClient(t, StreamDedicated, srv.url, Clocks{})
	sendOK(t, c) // ends at [DONE], before the last chunk was sent
	close(next)
	<-sent
	sendOK(t, c)
	if n := srv.conns.Load(); n != 1 {
		t.Fatalf("%d connections, want 1", n)
	}
}

// BenchmarkInstantStreams sends instant turns (a ping, the answer, the
// stop reason, [DONE]) one after the other from 8 goroutines to a local
// server, over dedicated streams that reuse their connections ("reuse") or
// dial one per stream ("dial": the transport's DisableKeepAlives turns the
// pool off). Client and server share the process, as in the bench.
func BenchmarkInstantStreams(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		answer(w, r)
	}))
	defer srv.Close()
	for _, mode := range []string{"reuse", "dial"} {
		b.Run(mode, func(b *testing.B) {
			tr := NewTransport()
			tr.DisableKeepAlives = mode == "dial"
			c, err := New(Config{BaseURL: srv.URL, HTTPClient: &http.Client{Transport: tr}})
			if err != nil {
				b.Fatal(err)
			}
			defer c.CloseIdleConnections()
			b.SetParallelism(4) // 8 goroutines on 2 CPUs
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := c.SendStream(context.Background(), sendReq(), NewStreamState(), StreamOptions{}); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
