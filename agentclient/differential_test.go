package agentclient

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// The differential suite: the same bytes, from a raw (or TLS) loopback
// server, read once by the dedicated stream transport and once by
// net/http, must lead to the same conclusion: the same events, the same
// class of error, and the same time to give up (within a tolerance). A
// row that differs fails the build; so does an input the fuzz target
// (FuzzTransportsAgree) finds.

// scriptStep is one thing a scripted server does: write bytes, then pause.
type scriptStep struct {
	write string
	pause time.Duration
}

// script is what a raw loopback server answers to a stream request.
type script struct {
	name  string
	steps []scriptStep
	// hold keeps the connection open after the steps, until the client
	// closes it (or holdMax passes: a transport that never gives up is
	// then seen giving up late, not hanging the suite).
	hold bool
	// mute: the server accepts and reads, but never answers (over TLS it
	// does not even answer the handshake).
	mute   bool
	tls    bool
	clocks Clocks
	ctx    time.Duration             // the caller's deadline; 0: none
	tune   func(t *http.Transport)   // the client's transport settings
	want   string                    // the conclusion both must reach (checks the row means what it says)
	check  func(t *testing.T, o run) // more to check, on each transport's run
}

// holdMax bounds how long a scripted server holds a connection open.
const holdMax = 3 * time.Second

// run is what a transport concluded from a script.
type run struct {
	conclusion string
	events     []string
	stop       string
	answer     string
	took       time.Duration
}

// conclusion names the class of a stream's outcome.
func conclusion(err error) string {
	var pe *ProtocolError
	var se *StreamError
	var ae *Error
	var ie *InvalidIDError
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, &pe):
		for _, e := range []error{ErrNotEventStream, ErrContentEncoding, ErrLineTooLong, ErrEventTooLong, ErrTranscriptTooLarge} {
			if errors.Is(pe.Err, e) {
				return "protocol " + e.Error()
			}
		}
		return "protocol"
	case errors.As(err, &se):
		switch {
		case se.Clock != "":
			return "clock " + string(se.Clock)
		case se.InBand != nil:
			return "in-band error"
		}
		return "cut"
	case errors.As(err, &ae):
		if ae.StatusCode != 0 {
			return fmt.Sprintf("http %d", ae.StatusCode)
		}
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return "transport (context)"
		}
		return "transport"
	case errors.As(err, &ie):
		return "invalid " + ie.Field
	}
	return "error"
}

func eventLabel(e Event) string {
	switch {
	case e.Done:
		return "[DONE]"
	case e.DecodeErr != nil:
		return e.SSEEvent + ":undecodable"
	case e.Message != nil:
		return e.SSEEvent + ":" + string(e.Message.Base().MessageType)
	}
	return e.SSEEvent + ":?"
}

// testTLS is a server certificate and a client configuration that trusts it.
var testTLS = sync.OnceValues(func() (*tls.Config, *tls.Config) {
	srv := httptest.NewUnstartedServer(http.NotFoundHandler())
	srv.StartTLS()
	defer srv.Close()
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	return &tls.Config{Certificates: srv.TLS.Certificates}, &tls.Config{RootCAs: pool, ServerName: "example.com"}
})

// serveScript answers every connection with sc. It reports each request
// head it read on heads (when not nil).
func serveScript(t testing.TB, sc *script, heads chan<- *http.Request) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	t.Cleanup(func() { close(done); _ = ln.Close(); wg.Wait() })
	serverTLS, _ := testTLS()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(2)
			finished := make(chan struct{})
			go func() {
				defer wg.Done()
				select {
				case <-done:
				case <-finished:
				case <-time.After(holdMax):
				}
				_ = c.Close()
			}()
			go func() {
				defer wg.Done()
				defer close(finished)
				if sc.mute {
					_, _ = io.Copy(io.Discard, c)
					return
				}
				var conn net.Conn = c
				if sc.tls {
					conn = tls.Server(c, serverTLS)
				}
				br := bufio.NewReader(conn)
				req, err := http.ReadRequest(br)
				if err != nil {
					return
				}
				_, _ = io.Copy(io.Discard, req.Body)
				if heads != nil {
					select {
					case heads <- req:
					default:
					}
				}
				for _, s := range sc.steps {
					if _, err := io.WriteString(conn, s.write); err != nil {
						return
					}
					if s.pause > 0 {
						time.Sleep(s.pause)
					}
				}
				if sc.hold {
					_, _ = io.Copy(io.Discard, conn) // until the client closes, or holdMax
				}
			}()
		}
	}()
	scheme := "http://"
	if sc.tls {
		scheme = "https://"
	}
	return scheme + ln.Addr().String()
}

// scriptClient is a client of one transport for sc, with its settings.
func scriptClient(t testing.TB, sc *script, url string, mode StreamTransport, hc *http.Client) *Client {
	t.Helper()
	tr := NewTransport()
	_, clientTLS := testTLS()
	tr.TLSClientConfig = clientTLS.Clone()
	if sc.tune != nil {
		sc.tune(tr)
	}
	if hc == nil {
		hc = &http.Client{}
	}
	hc.Transport = tr
	c, err := New(Config{BaseURL: url, APIKey: "sk-secret-key-123", Clocks: sc.clocks, RequestTimeout: 2 * time.Second,
		StreamTransport: mode, HTTPClient: hc})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.CloseIdleConnections)
	return c
}

// runScript sends one stream request through c and says what came of it.
func runScript(c *Client, sc *script) run {
	ctx := context.Background()
	if sc.ctx > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, sc.ctx)
		defer cancel()
	}
	st := NewStreamState()
	var r run
	start := time.Now()
	err := c.SendStream(ctx, SendRequest{AgentID: "agent-1", Text: "hi", Otid: "otid-1"}, st,
		StreamOptions{OnEvent: func(e Event) { r.events = append(r.events, eventLabel(e)) }})
	r.took = time.Since(start)
	r.conclusion = conclusion(err)
	r.stop = st.StopReason()
	r.answer = st.Snapshot().Answer
	return r
}

// bothTransports runs sc through each transport and fails on any
// difference in what they concluded.
func bothTransports(t *testing.T, sc *script) {
	t.Helper()
	url := serveScript(t, sc, nil)
	var runs [2]run
	for i, mode := range []StreamTransport{StreamDedicated, StreamNetHTTP} {
		c := scriptClient(t, sc, url, mode, nil)
		if got := c.StreamTransport(); got != mode && sc.tune == nil {
			t.Fatalf("client streams over %q, want %q", got, mode)
		}
		runs[i] = runScript(c, sc)
		if sc.check != nil {
			sc.check(t, runs[i])
		}
	}
	// Times are compared where a clock or the caller's context ends the read (a held connection,
	// a server that never answers); where the bytes end it, the time is the machine's speed.
	compareRuns(t, runs[0], runs[1], sc.hold || sc.mute)
	if sc.want != "" && runs[1].conclusion != sc.want {
		t.Errorf("net/http concluded %q, the row expects %q", runs[1].conclusion, sc.want)
	}
}

// giveUpSlack is how far apart the two transports may give up: the
// scheduling of two runs on a loaded machine, plus a fifth of the time.
const giveUpSlack = 250 * time.Millisecond

func compareRuns(t testing.TB, d, n run, timed bool) {
	t.Helper()
	if d.conclusion != n.conclusion || d.stop != n.stop || d.answer != n.answer ||
		strings.Join(d.events, " ") != strings.Join(n.events, " ") {
		t.Errorf("the transports differ:\ndedicated: %s stop=%q answer=%q events=%v\nnet/http:  %s stop=%q answer=%q events=%v",
			d.conclusion, d.stop, d.answer, d.events, n.conclusion, n.stop, n.answer, n.events)
	}
	if timed {
		diff := (d.took - n.took).Abs()
		if diff > giveUpSlack+max(d.took, n.took)/5 {
			t.Errorf("the transports gave up %v apart: dedicated after %v, net/http after %v", diff, d.took, n.took)
		}
	}
}

const sseHead = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"

// turnBody is a whole turn's events.
func turnBody() string {
	return data(fxPing) + data(fxAssistant) + data(fxStop) + data("[DONE]")
}

func gzipped(s string) string {
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	_, _ = io.WriteString(zw, s)
	_ = zw.Close()
	return b.String()
}

func w(s string) scriptStep { return scriptStep{write: s} }

func differentialScripts() []script {
	// Short clocks, with margins of 300 ms or more around every pause below (a loaded 2-CPU CI
	// machine delays a goroutine by tens of milliseconds), and the stop grace inside the stall
	// clock (with the two equal, which fires first after the last bytes is a race).
	short := Clocks{Connect: 600 * time.Millisecond, Stall: 600 * time.Millisecond, StopGrace: 300 * time.Millisecond}
	pad := strings.Repeat("X-Pad: "+strings.Repeat("p", 1000)+"\r\n", 11<<10) // 11 MiB of header lines
	var early strings.Builder
	for range 200 {
		early.WriteString("HTTP/1.1 103 Early Hints\r\nLink: </a>; rel=preload\r\n\r\n")
	}
	limit4K := func(tr *http.Transport) { tr.MaxResponseHeaderBytes = 4 << 10 }
	return []script{
		{name: "chunked turn", steps: []scriptStep{w(sseHead + "Transfer-Encoding: chunked\r\n\r\n" + chunkBody(turnBody(), 40, ""))}, want: "ok"},
		{name: "content-length turn", steps: []scriptStep{w(sseHead + fmt.Sprintf("Content-Length: %d\r\n\r\n", len(turnBody())) + turnBody())}, want: "ok"},
		{name: "turn until close", steps: []scriptStep{w(sseHead + "Connection: close\r\n\r\n" + turnBody())}, want: "ok"},
		{name: "turn cut mid-event", steps: []scriptStep{w(sseHead + "\r\n" + data(fxPing) + "data: {\"mess")}, want: "cut"},
		{name: "in-band error", steps: []scriptStep{w(sseHead + "\r\n" + data(fxPing) + "event: error\ndata: " + fxBareError + "\n\n")}, want: "in-band error"},
		{name: "not an event stream", steps: []scriptStep{w("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")}, want: "protocol " + ErrNotEventStream.Error()},
		{name: "stall after a ping", steps: []scriptStep{w(sseHead + "\r\n" + data(fxPing))}, hold: true, clocks: short, want: "clock stall"},
		{name: "pings under the stall clock, then the turn", clocks: short, want: "ok", steps: []scriptStep{
			{write: sseHead + "Transfer-Encoding: chunked\r\n\r\n" + chunkBody(data(fxPing), 64, "")[:len(chunkBody(data(fxPing), 64, ""))-5], pause: 150 * time.Millisecond},
			{write: chunkBody(data(fxPing), 64, "")[:len(chunkBody(data(fxPing), 64, ""))-5], pause: 150 * time.Millisecond},
			{write: chunkBody(data(fxPing), 64, "")[:len(chunkBody(data(fxPing), 64, ""))-5], pause: 150 * time.Millisecond},
			{write: chunkBody(turnBody(), 64, "")}}},
		{name: "a pause over the stall clock mid-event", clocks: short, hold: true, want: "clock stall", steps: []scriptStep{
			{write: sseHead + "\r\n" + data(fxPing) + "data: {\"message_type\":", pause: 1200 * time.Millisecond},
			{write: "\"assistant_message\"}\n\n"}}},
		{name: "head in pieces, slower than nothing but faster than the connect clock", clocks: short, want: "ok", steps: []scriptStep{
			{write: "HTTP/1.1 200 OK\r\n", pause: 100 * time.Millisecond},
			{write: "Content-Type: text/event-stream\r\nConnection: close\r\n", pause: 100 * time.Millisecond},
			{write: "\r\n" + turnBody()}}},
		{name: "no head: connect clock", steps: nil, hold: true, clocks: short, want: "clock connect"},
		{name: "head, no body: connect clock", steps: []scriptStep{w(sseHead + "Transfer-Encoding: chunked\r\n\r\n")}, hold: true, clocks: short, want: "clock connect"},
		{name: "stop_reason, end held back: stop grace", steps: []scriptStep{w(sseHead + "\r\n" + data(fxPing) + data(fxAssistant) + data(fxStop))}, hold: true, clocks: short, want: "ok"},
		{name: "malformed trailer, no stop_reason", steps: []scriptStep{w(sseHead + "Transfer-Encoding: chunked\r\n\r\n" +
			strings.TrimSuffix(chunkBody(data(fxPing), 64, ""), "\r\n") + "bad trailer line\n\r\n")}, want: "cut"},
		{name: "empty chunked body, malformed trailer", steps: []scriptStep{w(sseHead + "Transfer-Encoding: chunked\r\n\r\n0\r\nbad trailer line\r\n\r\n")}, want: "transport"},
		{name: "empty chunked body, trailer field without a name", steps: []scriptStep{w(sseHead + "Transfer-Encoding: chunked\r\n\r\n0\r\n: x\r\n\r\n")}, want: "transport"},
		{name: "empty chunked body, trailer starting with a space", steps: []scriptStep{w(sseHead + "Transfer-Encoding: chunked\r\n\r\n0\r\n X: y\r\n\r\n")}, want: "transport"},
		{name: "empty chunked body, trailer value with a NUL", steps: []scriptStep{w(sseHead + "Transfer-Encoding: chunked\r\n\r\n0\r\nX: a\x00b\r\n\r\n")}, want: "transport"},
		{name: "empty chunked body, cut in the trailer", steps: []scriptStep{w(sseHead + "Transfer-Encoding: chunked\r\n\r\n0\r\nX: y\r\n")}, want: "transport"},
		{name: "empty chunked body, good trailer", steps: []scriptStep{w(sseHead + "Transfer-Encoding: chunked\r\n\r\n0\r\nX-A: b\r\nX-C: d\r\n  folded\r\n\r\n")}, want: "cut"},
		{name: "turn then a good trailer", steps: []scriptStep{w(sseHead + "Transfer-Encoding: chunked\r\n\r\n" + strings.TrimSuffix(chunkBody(turnBody(), 64, ""), "\r\n") + "X-Run: r\r\n\r\n")}, want: "ok"},
		{name: "malformed trailer after stop_reason", steps: []scriptStep{w(sseHead + "Transfer-Encoding: chunked\r\n\r\n" +
			strings.TrimSuffix(chunkBody(data(fxAssistant)+data(fxStop), 64, ""), "\r\n") + "bad\n\r\n")}, want: "ok"},

		// 1. A non-2xx answer whose body never finishes.
		{name: "503, unfinished body: connect clock", steps: []scriptStep{w("HTTP/1.1 503 Service Unavailable\r\nContent-Length: 100\r\n\r\n{\"detail\":")},
			hold: true, clocks: Clocks{Connect: 200 * time.Millisecond}, ctx: time.Second, want: "http 503"},
		{name: "404, unfinished chunked body: caller's deadline", steps: []scriptStep{w("HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"det")},
			hold: true, clocks: Clocks{Connect: 5 * time.Second}, ctx: 300 * time.Millisecond, want: "http 404"},
		{name: "503 over TLS, unfinished body", tls: true, steps: []scriptStep{w("HTTP/1.1 503 Service Unavailable\r\nContent-Length: 100\r\n\r\n{\"detail\":")},
			hold: true, clocks: Clocks{Connect: 200 * time.Millisecond}, ctx: time.Second, want: "http 503"},
		{name: "101 switching protocols, held open", steps: []scriptStep{w("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")},
			hold: true, clocks: Clocks{Connect: 300 * time.Millisecond}, want: "http 101"},
		{name: "101 without an upgrade, held open", steps: []scriptStep{w("HTTP/1.1 101 Switching Protocols\r\n\r\n")},
			hold: true, clocks: Clocks{Connect: 300 * time.Millisecond}, want: "http 101"},
		{name: "503, whole body", steps: []scriptStep{w("HTTP/1.1 503 Service Unavailable\r\nContent-Length: 17\r\n\r\n{\"detail\":\"busy\"}")}, want: "http 503"},

		// 2. Response heads are bounded.
		{name: "head over 10 MiB", steps: []scriptStep{w("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n" + pad + "\r\n" + turnBody())}, want: "transport"},
		{name: "head over MaxResponseHeaderBytes", tune: limit4K,
			steps: []scriptStep{w("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n" + pad[:8<<10] + "\r\n" + turnBody())}, want: "transport"},
		{name: "1xx heads over MaxResponseHeaderBytes", tune: limit4K,
			steps: []scriptStep{w(early.String() + sseHead + "Connection: close\r\n\r\n" + turnBody())}, want: "transport"},
		{name: "a few 1xx heads", steps: []scriptStep{w("HTTP/1.1 100 Continue\r\n\r\n" + "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n" + sseHead + "Connection: close\r\n\r\n" + turnBody())}, want: "ok"},

		// 4. Empty bodies.
		{name: "content-length 0, kept open", steps: []scriptStep{w(sseHead + "Content-Length: 0\r\n\r\n")}, hold: true, clocks: Clocks{Connect: 2 * time.Second}, want: "cut"},
		{name: "204, kept open", steps: []scriptStep{w("HTTP/1.1 204 No Content\r\nContent-Type: text/event-stream\r\n\r\n")}, hold: true, clocks: Clocks{Connect: 2 * time.Second}, want: "cut"},
		{name: "204 with a chunked event stream", steps: []scriptStep{w("HTTP/1.1 204 No Content\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n" +
			chunkBody(turnBody(), 64, ""))}, hold: true, clocks: Clocks{Connect: 2 * time.Second}, want: "cut"},

		// TLS.
		{name: "chunked turn over TLS", tls: true, steps: []scriptStep{w(sseHead + "Transfer-Encoding: chunked\r\n\r\n" + chunkBody(turnBody(), 40, ""))}, want: "ok"},
		{name: "TLS handshake unanswered: TLSHandshakeTimeout", mute: true, tls: true, clocks: Clocks{Connect: 5 * time.Second},
			tune: func(tr *http.Transport) { tr.TLSHandshakeTimeout = 300 * time.Millisecond }, want: "transport"},

		// Minor: content coding.
		{name: "gzip sent unasked", steps: []scriptStep{w(sseHead + "Content-Encoding: gzip\r\nConnection: close\r\n\r\n" + gzipped(turnBody()))},
			want: "protocol " + ErrContentEncoding.Error()},
	}
}

// TestTransportsAgree runs every script of the differential table through
// both transports.
func TestTransportsAgree(t *testing.T) {
	for _, sc := range differentialScripts() {
		t.Run(sc.name, func(t *testing.T) {
			leakCheck(t)
			bothTransports(t, &sc)
		})
	}
}

// FuzzTransportsAgree feeds both transports the same response bytes (the
// server writes them and closes the connection): they must conclude the
// same (events, stop reason, answer, class of error).
func FuzzTransportsAgree(f *testing.F) {
	for _, sc := range differentialScripts() {
		if len(sc.steps) == 1 && !sc.hold && !sc.tls && sc.tune == nil && len(sc.steps[0].write) < 64<<10 {
			f.Add([]byte(sc.steps[0].write))
		}
	}
	f.Add([]byte("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: 5\r\n\r\n" + turnBody()))
	f.Add([]byte("HTTP/1.0 200 OK\r\n\r\n" + turnBody()))
	f.Add([]byte("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n" + chunkBody(turnBody(), 7, ";x=1")))
	f.Add([]byte("HTTP/1.1 429 Too Many Requests\r\nRetry-After: 2\r\nContent-Length: 17\r\n\r\n{\"detail\":\"slow\"}"))
	f.Fuzz(func(t *testing.T, resp []byte) {
		sc := &script{steps: []scriptStep{{write: string(resp)}}, clocks: Clocks{Connect: 2 * time.Second, Stall: 2 * time.Second}}
		url := serveScript(t, sc, nil)
		var runs [2]run
		for i, mode := range []StreamTransport{StreamDedicated, StreamNetHTTP} {
			runs[i] = runScript(scriptClient(t, sc, url, mode, nil), sc)
			if runs[i].took > time.Second {
				t.Errorf("%s took %v over a connection the server closed: %s", mode, runs[i].took, runs[i].conclusion)
			}
		}
		compareRuns(t, runs[0], runs[1], false)
	})
}
