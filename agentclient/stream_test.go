package agentclient

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

var timeZero time.Time

// leakCheck verifies, after every other cleanup of the test (servers
// closed, handlers released), that no goroutine started by it is left.
func leakCheck(t *testing.T) {
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
}

// releaseOnCleanup returns a channel closed when the test ends, before the
// leak check.
func releaseOnCleanup(t *testing.T) chan struct{} {
	ch := make(chan struct{})
	t.Cleanup(func() { close(ch) })
	return ch
}

// rawServer serves a hand-written SSE script, so the client is tested
// against WIRE.md's framing and not against our simulator.
type rawServer struct {
	*httptest.Server
	mu       sync.Mutex
	bodies   []map[string]any
	headers  []http.Header
	handlers []func(w http.ResponseWriter, r *http.Request)
	calls    atomic.Int32
}

func newRaw(t *testing.T, h ...func(w http.ResponseWriter, r *http.Request)) *rawServer {
	rs := &rawServer{handlers: h}
	rs.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := int(rs.calls.Add(1)) - 1
		var body map[string]any
		_ = json.NewDecoder(r.Body).Decode(&body)
		rs.mu.Lock()
		rs.bodies = append(rs.bodies, body)
		rs.headers = append(rs.headers, r.Header.Clone())
		rs.mu.Unlock()
		if n >= len(rs.handlers) {
			n = len(rs.handlers) - 1
		}
		rs.handlers[n](w, r)
	}))
	t.Cleanup(rs.Close)
	return rs
}

func sse(w http.ResponseWriter, frames ...string) {
	for _, f := range frames {
		_, _ = io.WriteString(w, f)
	}
	if fl, ok := w.(http.Flusher); ok {
		fl.Flush()
	}
}

func data(js string) string { return "data: " + js + "\n\n" }

func startSSE(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(200)
}

// eachTransport runs a stream test over both stream transports.
func eachTransport(t *testing.T, f func(t *testing.T, tr StreamTransport)) {
	for _, tr := range []StreamTransport{StreamDedicated, StreamNetHTTP} {
		t.Run(strings.ReplaceAll(string(tr), "/", ""), func(t *testing.T) { f(t, tr) })
	}
}

func newClient(t *testing.T, tr StreamTransport, url string, clocks Clocks) *Client {
	t.Helper()
	c, err := New(Config{BaseURL: url, APIKey: "sk-secret-key-123", Clocks: clocks, RequestTimeout: 2 * time.Second, StreamTransport: tr})
	if err != nil {
		t.Fatal(err)
	}
	if got := c.StreamTransport(); got != tr {
		t.Fatalf("client streams over %q, want %q", got, tr)
	}
	t.Cleanup(c.CloseIdleConnections)
	return c
}

func sendReq() SendRequest {
	return SendRequest{AgentID: "agent-1", Text: "hi", Otid: "otid-1", SenderID: "user-1"}
}

func TestSendStreamHappyPath(t *testing.T) {
	eachTransport(t, func(t *testing.T, tr StreamTransport) {
		rs := newRaw(t, func(w http.ResponseWriter, r *http.Request) {
			startSSE(w)
			sse(w, data(fxPing), data(fxReasoning), data(fxToolCall), data(fxToolReturn), data(fxAssistant),
				data(fxStop), data(fxUsage), data("[DONE]"))
		})
		c := newClient(t, tr, rs.URL, Clocks{})
		st := NewStreamState()
		var events []Event
		err := c.SendStream(context.Background(), sendReq(), st, StreamOptions{OnEvent: func(e Event) { events = append(events, e) }})
		if err != nil {
			t.Fatal(err)
		}
		s := st.Snapshot()
		if s.RunID != "run-11111111-aaaa" || s.StopReason != "end_turn" || s.Answer != "Here you go" || !s.Done || s.Pings != 1 {
			t.Errorf("state: run %q stop %q answer %q done %v pings %d", s.RunID, s.StopReason, s.Answer, s.Done, s.Pings)
		}
		if len(events) != 8 || !events[7].Done {
			t.Errorf("events = %d", len(events))
		}
		// The request is what Letta expects.
		b := rs.bodies[0]
		msgs := b["messages"].([]any)
		m := msgs[0].(map[string]any)
		if m["otid"] != "otid-1" || m["role"] != "user" || m["type"] != "message" || m["content"] != "hi" || m["sender_id"] != "user-1" {
			t.Errorf("message body: %v", m)
		}
		if b["include_pings"] != true {
			t.Errorf("include_pings must be true: %v", b)
		}
		h := rs.headers[0]
		if h.Get("Authorization") != "Bearer sk-secret-key-123" || strings.HasPrefix(h.Get("User-Agent"), "Go-http-client") {
			t.Errorf("headers: auth %q ua %q", h.Get("Authorization"), h.Get("User-Agent"))
		}
	})
}

func TestSendStreamOddFraming(t *testing.T) {
	eachTransport(t, func(t *testing.T, tr StreamTransport) {
		t.Run("cancelled stop reason with spaces", func(t *testing.T) {
			rs := newRaw(t, func(w http.ResponseWriter, r *http.Request) {
				startSSE(w)
				sse(w, data(fxPing), data(fxStopSpaced), data("[DONE]"))
			})
			st := NewStreamState()
			if err := newClient(t, tr, rs.URL, Clocks{}).SendStream(context.Background(), sendReq(), st, StreamOptions{}); err != nil {
				t.Fatal(err)
			}
			if st.StopReason() != "cancelled" {
				t.Errorf("stop = %q", st.StopReason())
			}
		})
		t.Run("foreground failure: stop_reason then error, no DONE", func(t *testing.T) {
			rs := newRaw(t, func(w http.ResponseWriter, r *http.Request) {
				startSSE(w)
				sse(w, data(fxPing), data(fxReasoning), data(`{"message_type":"stop_reason","stop_reason":"llm_api_error"}`),
					"event: error\n"+data(fxErrorMsg))
			})
			st := NewStreamState()
			if err := newClient(t, tr, rs.URL, Clocks{}).SendStream(context.Background(), sendReq(), st, StreamOptions{}); err != nil {
				t.Fatal(err)
			}
			s := st.Snapshot()
			if s.StopReason != "llm_api_error" || s.Error == nil || s.Error.ErrorType != "llm_timeout" {
				t.Errorf("state: %q %+v", s.StopReason, s.Error)
			}
		})
		t.Run("unhandled exception without message_type", func(t *testing.T) {
			rs := newRaw(t, func(w http.ResponseWriter, r *http.Request) {
				startSSE(w)
				sse(w, data(fxPing), data(fxReasoning), "event: error\n"+data(fxBareError))
			})
			st := NewStreamState()
			err := newClient(t, tr, rs.URL, Clocks{}).SendStream(context.Background(), sendReq(), st, StreamOptions{})
			var se *StreamError
			if !errors.As(err, &se) || se.InBand == nil || se.InBand.ErrorType != "INTERNAL_SERVER_ERROR" || se.State.RunID != "run-11111111-aaaa" {
				t.Fatalf("err = %v", err)
			}
			if Classify(err) != Retryable {
				t.Error("an in-band error before stop_reason leaves the run unknown: retryable (continue)")
			}
		})
		t.Run("event cancelled", func(t *testing.T) {
			rs := newRaw(t, func(w http.ResponseWriter, r *http.Request) {
				startSSE(w)
				sse(w, data(fxPing), "event: cancelled\ndata: {}\n\n")
			})
			st := NewStreamState()
			if err := newClient(t, tr, rs.URL, Clocks{}).SendStream(context.Background(), sendReq(), st, StreamOptions{}); err != nil {
				t.Fatal(err)
			}
			if st.StopReason() != "cancelled" {
				t.Errorf("stop = %q", st.StopReason())
			}
		})
		t.Run("unknown types and garbage are skipped", func(t *testing.T) {
			rs := newRaw(t, func(w http.ResponseWriter, r *http.Request) {
				startSSE(w)
				sse(w, data(fxPing), data(fxUnknown), data("not json"), data(fxAssistant), data(fxStop), data("[DONE]"))
			})
			st := NewStreamState()
			var decodeErrs, unknown int
			err := newClient(t, tr, rs.URL, Clocks{}).SendStream(context.Background(), sendReq(), st, StreamOptions{OnEvent: func(e Event) {
				if e.DecodeErr != nil {
					decodeErrs++
				}
				if _, ok := e.Message.(*UnknownMessage); ok {
					unknown++
				}
			}})
			if err != nil || st.Answer() != "Here you go" || decodeErrs != 1 || unknown != 1 {
				t.Fatalf("err %v answer %q decodeErrs %d unknown %d", err, st.Answer(), decodeErrs, unknown)
			}
		})
		t.Run("EOF before stop_reason is a cut, state kept", func(t *testing.T) {
			rs := newRaw(t, func(w http.ResponseWriter, r *http.Request) {
				startSSE(w)
				sse(w, data(fxPing), data(fxReasoning), data(fxToolCall))
			})
			st := NewStreamState()
			err := newClient(t, tr, rs.URL, Clocks{}).SendStream(context.Background(), sendReq(), st, StreamOptions{})
			var se *StreamError
			if !errors.As(err, &se) || se.Clock != "" || se.State.RunID == "" || len(se.State.Transcript.Steps) != 2 {
				t.Fatalf("err = %#v", err)
			}
			if !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Errorf("cut should wrap io.ErrUnexpectedEOF: %v", err)
			}
		})
	})
}

// block waits until the client goes away (or the test ends).
func block(r *http.Request, release <-chan struct{}) {
	select {
	case <-r.Context().Done():
	case <-release:
	}
}

func TestClocks(t *testing.T) {
	eachTransport(t, func(t *testing.T, tr StreamTransport) {
		leakCheck(t)
		release := releaseOnCleanup(t)
		short := Clocks{Connect: 150 * time.Millisecond, Stall: 150 * time.Millisecond, Total: 600 * time.Millisecond, ContentIdle: -1, StopGrace: 100 * time.Millisecond}

		cases := []struct {
			name    string
			handler func(w http.ResponseWriter, r *http.Request)
			clock   Clock
			runID   string
		}{
			{"connect: headers but no body byte", func(w http.ResponseWriter, r *http.Request) {
				startSSE(w)
				w.(http.Flusher).Flush()
				block(r, release)
			}, ClockConnect, ""},
			{"connect: no headers at all", func(w http.ResponseWriter, r *http.Request) { block(r, release) }, ClockConnect, ""},
			{"stall: silence after content", func(w http.ResponseWriter, r *http.Request) {
				startSSE(w)
				sse(w, data(fxPing), data(fxReasoning))
				block(r, release)
			}, ClockStall, "run-11111111-aaaa"},
			{"total: pings keep it alive past stall, total caps it", func(w http.ResponseWriter, r *http.Request) {
				startSSE(w)
				sse(w, data(fxPing))
				tk := time.NewTicker(40 * time.Millisecond)
				defer tk.Stop()
				for {
					select {
					case <-r.Context().Done():
						return
					case <-release:
						return
					case <-tk.C:
						sse(w, data(fxPing))
					}
				}
			}, ClockTotal, "run-11111111-aaaa"},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				rs := newRaw(t, tc.handler)
				c := newClient(t, tr, rs.URL, short)
				st := NewStreamState()
				err := c.SendStream(context.Background(), sendReq(), st, StreamOptions{})
				var se *StreamError
				if !errors.As(err, &se) {
					t.Fatalf("err = %v, want StreamError", err)
				}
				if se.Clock != tc.clock || !se.Timeout() {
					t.Fatalf("clock = %q, want %q (%v)", se.Clock, tc.clock, err)
				}
				if se.State.RunID != tc.runID {
					t.Errorf("state run id = %q, want %q", se.State.RunID, tc.runID)
				}
				if !strings.Contains(err.Error(), string(tc.clock)) {
					t.Errorf("error text must name the clock: %v", err)
				}
				c.hc.CloseIdleConnections()
			})
		}
	})
}

func TestContentIdleNeverAborts(t *testing.T) {
	eachTransport(t, func(t *testing.T, tr StreamTransport) {
		leakCheck(t)
		rs := newRaw(t, func(w http.ResponseWriter, r *http.Request) {
			startSSE(w)
			sse(w, data(fxPing))
			for i := 0; i < 12; i++ { // pings only, 360ms in all
				time.Sleep(30 * time.Millisecond)
				sse(w, data(fxPing))
			}
			sse(w, data(fxAssistant), data(fxStop), data("[DONE]"))
		})
		c := newClient(t, tr, rs.URL, Clocks{Connect: time.Second, Stall: 200 * time.Millisecond, Total: 5 * time.Second, ContentIdle: 100 * time.Millisecond})
		var idles atomic.Int32
		st := NewStreamState()
		err := c.SendStream(context.Background(), sendReq(), st, StreamOptions{OnIdle: func(time.Duration) { idles.Add(1) }})
		if err != nil {
			t.Fatalf("pings only for longer than the stall clock must not abort: %v", err)
		}
		if n := idles.Load(); n < 2 {
			t.Errorf("OnIdle called %d times, want at least 2 (every 100ms of 360ms)", n)
		}
		if st.Answer() != "Here you go" {
			t.Errorf("answer %q", st.Answer())
		}
		c.hc.CloseIdleConnections()
	})
}

func TestStopGraceCompletesTurn(t *testing.T) {
	eachTransport(t, func(t *testing.T, tr StreamTransport) {
		release := releaseOnCleanup(t)
		rs := newRaw(t, func(w http.ResponseWriter, r *http.Request) {
			startSSE(w)
			sse(w, data(fxPing), data(fxAssistant), data(fxStop))
			block(r, release) // never closes the body, never sends [DONE]
		})
		c := newClient(t, tr, rs.URL, Clocks{Stall: 10 * time.Second, StopGrace: 50 * time.Millisecond})
		st := NewStreamState()
		start := time.Now()
		if err := c.SendStream(context.Background(), sendReq(), st, StreamOptions{}); err != nil {
			t.Fatalf("a body left open after stop_reason is a complete turn: %v", err)
		}
		if time.Since(start) > 5*time.Second {
			t.Error("stop grace did not close the body")
		}
		if st.StopReason() != "end_turn" {
			t.Error("stop reason lost")
		}
	})
}

func TestCancelMidStreamKeepsState(t *testing.T) {
	eachTransport(t, func(t *testing.T, tr StreamTransport) {
		leakCheck(t)
		release := releaseOnCleanup(t)
		sent := make(chan struct{})
		partial := `{"id":"message-c3","date":"2026-01-01T00:00:03+00:00","message_type":"assistant_message","run_id":"run-11111111-aaaa","seq_id":7,"content":"Half an ans"}`
		rs := newRaw(t, func(w http.ResponseWriter, r *http.Request) {
			startSSE(w)
			sse(w, data(fxPing), data(fxReasoning), data(fxToolCall), data(fxToolReturn), data(partial))
			close(sent)
			block(r, release)
		})
		c := newClient(t, tr, rs.URL, Clocks{})
		st := NewStreamState()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		applied := make(chan struct{})
		var once sync.Once
		opts := StreamOptions{OnEvent: func(e Event) {
			// OnEvent runs after the state was updated with the event.
			if _, ok := e.Message.(*AssistantMessage); ok {
				once.Do(func() { close(applied) })
			}
		}}
		go func() { done <- c.SendStream(ctx, sendReq(), st, opts) }()
		<-sent
		<-applied // the reader has applied the partial answer: cancel now
		cancel()
		err := <-done
		var se *StreamError
		if !errors.As(err, &se) || se.Clock != ClockCanceled || Classify(err) != Canceled {
			t.Fatalf("err = %v", err)
		}
		s := st.Snapshot()
		if s.RunID != "run-11111111-aaaa" || s.Answer != "Half an ans" || len(s.MessageIDs) != 3 || !s.HasSeq || s.LastSeq != 7 {
			t.Errorf("state lost on cancel: run %q answer %q ids %v seq %d", s.RunID, s.Answer, s.MessageIDs, s.LastSeq)
		}
		if s.Stage != StageAnswering {
			t.Errorf("phase = %q", s.Stage)
		}
		if st.PollCursor() != "message-b2" || st.LastMessageID() != "message-c3" {
			t.Errorf("cursor %q last %q", st.PollCursor(), st.LastMessageID())
		}
		c.hc.CloseIdleConnections()
	})
}

func TestStateReadableWhileStreaming(t *testing.T) {
	eachTransport(t, func(t *testing.T, tr StreamTransport) {
		rs := newRaw(t, func(w http.ResponseWriter, r *http.Request) {
			startSSE(w)
			for i := 0; i < 200; i++ {
				sse(w, data(`{"id":"message-x","date":"2026-01-01T00:00:00+00:00","message_type":"assistant_message","run_id":"run-1","content":"a"}`))
			}
			sse(w, data(fxStop), data("[DONE]"))
		})
		c := newClient(t, tr, rs.URL, Clocks{})
		st := NewStreamState()
		stop := make(chan struct{})
		go func() {
			for {
				select {
				case <-stop:
					return
				default:
					_ = st.Snapshot()
				}
			}
		}()
		err := c.SendStream(context.Background(), sendReq(), st, StreamOptions{})
		close(stop)
		if err != nil || len(st.Answer()) != 200 {
			t.Fatalf("err %v answer len %d", err, len(st.Answer()))
		}
	})
}

func TestHTTPErrorsAndClassification(t *testing.T) {
	eachTransport(t, func(t *testing.T, tr StreamTransport) {
		const key = "sk-secret-key-123"
		cases := []struct {
			status     int
			body       string
			retryAfter string
			class      Class
			detail     string
		}{
			{400, `{"detail":"INVALID_ARGUMENT: bad"}`, "", Permanent, "INVALID_ARGUMENT: bad"},
			{402, `{"detail":"insufficient credits"}`, "", Permanent, "insufficient credits"},
			{404, `{"detail":"Agent agent-1 not found"}`, "", Permanent, "Agent agent-1 not found"},
			{409, `{"detail":{"message":"busy","run_id":"run-9"}}`, "", Permanent, "busy"},
			{409, `{"detail":"database is locked"}`, "1", Retryable, "database is locked"},
			{410, `{"detail":"too old"}`, "", Permanent, "too old"},
			{422, `{"trace_id":"t","detail":"streaming=true is only supported for SDK v1.0+ clients","examples":[]}`, "", Permanent, "SDK v1.0+"},
			{429, `{"detail":"rate limited"}`, "3", Retryable, "rate limited"},
			{500, `{"detail":"boom ` + key + `"}`, "", Retryable, "[REDACTED]"},
			{502, `{"error":{"type":"llm_error","message":"upstream","detail":"x"}}`, "", Retryable, "upstream"},
			{503, `oops`, "", Retryable, "oops"},
		}
		for _, tc := range cases {
			rs := newRaw(t, func(w http.ResponseWriter, r *http.Request) {
				if tc.retryAfter != "" {
					w.Header().Set("Retry-After", tc.retryAfter)
				}
				w.WriteHeader(tc.status)
				_, _ = io.WriteString(w, tc.body)
			})
			c := newClient(t, tr, rs.URL, Clocks{})
			err := c.SendStream(context.Background(), sendReq(), NewStreamState(), StreamOptions{})
			var ae *Error
			if !errors.As(err, &ae) || ae.StatusCode != tc.status {
				t.Fatalf("%d: err = %v", tc.status, err)
			}
			if Classify(err) != tc.class {
				t.Errorf("%d %s: class %v, want %v", tc.status, tc.retryAfter, Classify(err), tc.class)
			}
			if !strings.Contains(ae.Detail, tc.detail) {
				t.Errorf("%d: detail %q, want %q", tc.status, ae.Detail, tc.detail)
			}
			if strings.Contains(err.Error(), key) {
				t.Errorf("%d: API key leaked into the error: %v", tc.status, err)
			}
			if tc.retryAfter != "" && ae.RetryAfter == 0 {
				t.Errorf("%d: Retry-After not parsed", tc.status)
			}
			if tc.status == 409 && tc.retryAfter == "" && ae.RunID != "run-9" {
				t.Errorf("409 busy: run id %q", ae.RunID)
			}
		}
		// Connection refused: retryable transport error, key not in the text.
		c := newClient(t, tr, "http://127.0.0.1:1", Clocks{})
		_, err := c.GetRun(context.Background(), "run-1")
		if Classify(err) != Retryable || strings.Contains(err.Error(), key) {
			t.Errorf("transport error: %v (%v)", err, Classify(err))
		}
	})
}

func TestNewValidatesConfig(t *testing.T) {
	for _, u := range []string{"ftp://x", "://", "localhost:8283"} {
		if _, err := New(Config{BaseURL: u}); err == nil {
			t.Errorf("base URL %q accepted", u)
		}
	}
	_, err := New(Config{BaseURL: "http://user:hunter2@host"})
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("credentials in URL: %v", err)
	}
	if err := (&SendRequest{AgentID: "a", Text: "t"}).validate(); err == nil || !strings.Contains(err.Error(), "Otid") {
		t.Errorf("missing otid: %v", err)
	}
}

func TestRetryAfterParsing(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if d := parseRetryAfter("2", now); d != 2*time.Second {
		t.Errorf("seconds: %v", d)
	}
	if d := parseRetryAfter(now.Add(5*time.Second).Format(http.TimeFormat), now); d != 5*time.Second {
		t.Errorf("date: %v", d)
	}
	if d := parseRetryAfter("soon", now); d != 0 {
		t.Errorf("garbage: %v", d)
	}
}
