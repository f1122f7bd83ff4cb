package continuation_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/lettaq/lettaq/agentclient"
	"github.com/lettaq/lettaq/budget"
	"github.com/lettaq/lettaq/continuation"
)

// TestProtocolViolationEndsTheTurnWithoutResend: a server that breaks the
// protocol (a line or an event over the limit, a body that is not SSE, a
// transcript over its bound) ends the turn Failed, not retryable, with a
// reason that names the violation and the limit — after exactly one send,
// with no history lookup and no resend.
func TestProtocolViolationEndsTheTurnWithoutResend(t *testing.T) {
	const lineLimit, eventLimit, transcriptLimit = 1 << 10, 4 << 10, 8 << 10
	cases := []struct {
		name, ctype string
		body        func() string
		want        []string
	}{
		{"line too long", "text/event-stream", func() string {
			return `data: {"message_type":"ping"}` + "\n\n" + "data: " + strings.Repeat("x", 2*lineLimit) + "\n\n"
		}, []string{"line too long", "limit 1024 bytes", "MaxLineBytes"}},
		{"event too long", "text/event-stream", func() string {
			return strings.Repeat("data: "+strings.Repeat("y", lineLimit/2)+"\n", 20) + "\n"
		}, []string{"event too long", "limit 4096 bytes", "MaxEventBytes"}},
		{"html body", "text/html; charset=utf-8", func() string {
			return "<html><body>502 Bad Gateway</body></html>"
		}, []string{"not an event stream", "text/html"}},
		{"json body", "application/json", func() string { return `{"detail":"ok"}` },
			[]string{"not an event stream", "application/json"}},
		{"transcript too large", "text/event-stream", func() string {
			var b strings.Builder
			for i := 0; i < 20; i++ {
				fmt.Fprintf(&b, `data: {"message_type":"assistant_message","id":"m1","run_id":"run-1","content":"%s"}`+"\n\n", strings.Repeat("z", 900))
			}
			return b.String()
		}, []string{"transcript too large", "limit 8192 bytes", "MaxTranscriptBytes"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var sends, others atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/messages/stream") {
					sends.Add(1)
					w.Header().Set("Content-Type", tc.ctype)
					_, _ = w.Write([]byte(tc.body()))
					return
				}
				others.Add(1)
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write([]byte("[]"))
			}))
			defer srv.Close()
			c, err := agentclient.New(agentclient.Config{BaseURL: srv.URL, RequestTimeout: time.Second,
				MaxLineBytes: lineLimit, MaxEventBytes: eventLimit, MaxTranscriptBytes: transcriptLimit})
			if err != nil {
				t.Fatal(err)
			}
			b := testBudget()
			b.ResendPolicy = budget.ResendIfNotAdmitted
			r, err := continuation.New(continuation.Config{Client: c, Budget: b})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			tu := continuation.Turn{AgentID: "agent-1", Otid: uuid.NewString(), Text: "hi", Started: time.Now()}
			d := runTurn(ctx, r, tu, agentclient.NewStreamState(), continuation.Hooks{})
			if n := sends.Load(); n != 1 {
				t.Fatalf("%d sends, want 1 (decision %+v)", n, d)
			}
			if n := others.Load(); n != 0 {
				t.Errorf("%d lookups or polls after a protocol violation, want 0", n)
			}
			if d.Outcome != continuation.Failed || d.Retryable || d.Resend == continuation.ResendSent {
				t.Fatalf("decision %v retryable=%v resend=%q: %s", d.Outcome, d.Retryable, d.Resend, d.Reason)
			}
			if !agentclient.IsProtocolError(d.Err) || agentclient.Classify(d.Err) != agentclient.Permanent {
				t.Errorf("err %T %v: want a permanent *ProtocolError", d.Err, d.Err)
			}
			for _, w := range tc.want {
				if !strings.Contains(d.Reason, w) {
					t.Errorf("reason %q does not name %q", d.Reason, w)
				}
			}
		})
	}
}

// TestInvalidAgentIDIsRejectedWithoutRequests: an agent id that cannot be a
// Letta id ("..", a '/', a space) is refused by the client before any
// request (it would reach another path): the turn is Rejected, not
// retryable, naming agent_id, with no send and no lookup.
func TestInvalidAgentIDIsRejectedWithoutRequests(t *testing.T) {
	for _, id := range []string{"..", "agent 1/x", "agent-1/../../v1/admin"} {
		var requests atomic.Int32
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			requests.Add(1)
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte("[]"))
		}))
		c, err := agentclient.New(agentclient.Config{BaseURL: srv.URL, RequestTimeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		r, err := continuation.New(continuation.Config{Client: c, Budget: testBudget()})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		tu := continuation.Turn{AgentID: id, Otid: uuid.NewString(), Text: "hi", Started: time.Now()}
		d := runTurn(ctx, r, tu, agentclient.NewStreamState(), continuation.Hooks{})
		cancel()
		srv.Close()
		if n := requests.Load(); n != 0 {
			t.Errorf("agent id %q: %d requests, want 0 (decision %v: %s)", id, n, d.Outcome, d.Reason)
		}
		if d.Outcome != continuation.Rejected || d.Retryable || !strings.Contains(d.Reason, "agent_id") {
			t.Errorf("agent id %q: decision %v retryable=%v reason %q: want Rejected, not retryable, naming agent_id", id, d.Outcome, d.Retryable, d.Reason)
		}
	}
}
